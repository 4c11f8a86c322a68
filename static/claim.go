package static

import (
	_ "embed"
	"html/template"
	"io"
)

// ClaimFile is the claim page's file name.
const ClaimFile = "claim.html"

//go:embed claim.html
var claimPage string

var claimTmpl = template.Must(template.New(ClaimFile).Parse(claimPage))

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
