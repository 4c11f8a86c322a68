package static

import (
	_ "embed"
	"html/template"
	"io"
)

// The claim link's pages' file names: the page of a claim link, and the
// page of a claim link refused. The second uses the first's head (its
// styles), so that both look the same.
const (
	ClaimFile        = "claim.html"
	ClaimRefusedFile = "claim_refused.html"
)

//go:embed claim.html
var claimPage string

//go:embed claim_refused.html
var claimRefusedPage string

var (
	claimTmpl        = template.Must(template.New(ClaimFile).Parse(claimPage))
	claimRefusedTmpl = template.Must(template.Must(claimTmpl.Clone()).New(ClaimRefusedFile).Parse(claimRefusedPage))
)

// ClaimPageData fills the claim page, the answer to a GET of a claim link:
// it claims nothing itself, nor does its script; the person's click of its
// button posts the form (by fetch with script, once; as a form without).
type ClaimPageData struct {
	// BasePath is where the sidecar is mounted, e.g. "/anteroom"; a trailing
	// slash is removed. The form posts to BasePath + "/claim?gate=<Gate>".
	BasePath string
	// Gate is the link's gate; empty means "default".
	Gate string
	// Ticket is the link's claim ticket, posted in the form's body.
	Ticket string
	// Next, when set, is the local path the claim redirects to.
	Next string
	// Nonce: as WaitingPageData.Nonce.
	Nonce string
}

// RenderClaimPage writes the claim page (HTML, UTF-8) to w, with the same
// escaping and error behaviour as [RenderWaitingPage]: it returns the
// template's execution error, or the error of w.Write.
func RenderClaimPage(w io.Writer, data ClaimPageData) error {
	data.BasePath, data.Gate = normalize(data.BasePath, data.Gate)
	return render(w, claimTmpl, data)
}

// ClaimRefusal says why a claim link's page could not be shown; the page
// of the refusal says it in a sentence, and what to do.
type ClaimRefusal string

// The reasons a claim link is refused.
const (
	// ClaimInvalid: the link's ticket is missing, cut short, changed or
	// forged, or the link names a gate that does not exist.
	ClaimInvalid ClaimRefusal = "invalid"
	// ClaimExpired: the link's ticket is genuine, and its claim window is
	// over.
	ClaimExpired ClaimRefusal = "expired"
	// ClaimUsed: the link let someone in already, or its slot is gone.
	ClaimUsed ClaimRefusal = "used"
	// ClaimBusy: the link could not be checked now (too many requests, the
	// sidecar unavailable or failing); the same link may work in a moment.
	ClaimBusy ClaimRefusal = "busy"
)

// ClaimRefusedPageData fills the page of a claim link refused, the answer
// a browser gets instead of a JSON error when it opens a link that is not
// valid, has expired or was used. The page never holds the link's ticket.
type ClaimRefusedPageData struct {
	// BasePath is where the sidecar is mounted, e.g. "/anteroom"; a
	// trailing slash is removed. Without Next, the page's button leads to
	// the waiting page, BasePath + "/?gate=<Gate>".
	BasePath string
	// Gate is the waiting page's gate: a gate that exists (not whatever
	// the link named); empty means "default".
	Gate string
	// Next, when set, is where the page's button leads instead: a local
	// path (the caller checks it), such as the link's next, or its
	// form's when the claim page's form was posted.
	Next string
	// Reason is why the link was refused; an unknown one reads as
	// ClaimInvalid. ClaimBusy shows no button: the link itself, reloaded,
	// is the way on.
	Reason ClaimRefusal
	// Posted says the page answers the claim page's form, posted: the busy
	// page then says to go back and press the button again, since a reload
	// would post the form again behind a browser's warning.
	Posted bool
	// Nonce: as WaitingPageData.Nonce.
	Nonce string
}

// RenderClaimRefusedPage writes the page of a claim link refused (HTML,
// UTF-8) to w, in the claim page's look, with the same escaping and error
// behaviour as [RenderWaitingPage]: it returns the template's execution
// error, or the error of w.Write.
func RenderClaimRefusedPage(w io.Writer, data ClaimRefusedPageData) error {
	data.BasePath, data.Gate = normalize(data.BasePath, data.Gate)
	return render(w, claimRefusedTmpl, data)
}
