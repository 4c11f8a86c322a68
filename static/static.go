// Package static embeds the browser side of anteroom: the drop-in snippet
// anteroom.js, the waiting page, the demo page and the operator's dashboard.
//
// The snippet is served as is (see [Snippet], [SnippetETag]); the two pages
// are html/template templates that need the sidecar's base path and the gate
// ([RenderWaitingPage], [RenderDemoPage]). The package has no dependencies
// beyond the standard library and does no I/O besides writing to the given
// writer.
package static

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"io"
	"io/fs"
	"strings"
)

// File names inside [FS].
const (
	SnippetFile = "anteroom.js"
	WaitingFile = "waiting.html"
	DemoFile    = "demo.html"
	AdminFile   = "admin.html"
)

// SnippetContentType is the Content-Type to serve [Snippet] with.
const SnippetContentType = "text/javascript; charset=utf-8"

//go:embed anteroom.js waiting.html demo.html admin.html
var files embed.FS

// FS holds the embedded files at its root: anteroom.js, waiting.html,
// demo.html and admin.html. The HTML files are templates; serve them through
// [RenderWaitingPage], [RenderDemoPage] and [RenderAdminPage], not raw.
var FS fs.FS = files

var (
	snippet     = mustRead(SnippetFile)
	snippetETag = func() string {
		sum := sha256.Sum256(snippet)
		return `"` + hex.EncodeToString(sum[:12]) + `"`
	}()
	waitingTmpl = template.Must(template.New(WaitingFile).Parse(string(mustRead(WaitingFile))))
	demoTmpl    = template.Must(template.New(DemoFile).Parse(string(mustRead(DemoFile))))
	adminTmpl   = template.Must(template.New(AdminFile).Parse(string(mustRead(AdminFile))))
)

func mustRead(name string) []byte {
	b, err := files.ReadFile(name)
	if err != nil {
		panic("static: " + err.Error()) // cannot happen: the file is embedded
	}
	return b
}

// Snippet returns the content of anteroom.js. The slice is shared: callers
// must not modify it. It never fails.
func Snippet() []byte { return snippet }

// SnippetETag returns a strong ETag (quoted) for [Snippet], derived from its
// content, so the HTTP layer can answer conditional requests.
func SnippetETag() string { return snippetETag }

// WaitingPageData fills the waiting page.
type WaitingPageData struct {
	// BasePath is where the sidecar is mounted, e.g. "/anteroom"; a trailing
	// slash is removed. The page loads BasePath + "/anteroom.js".
	BasePath string
	// Gate is the gate to join; empty means "default".
	Gate string
	// Nonce, when set, is put on the page's script and style elements, for
	// a Content-Security-Policy that allows only them ('nonce-<Nonce>').
	Nonce string
	// RedirectURL, if set, is where the page goes once admitted (it must be
	// on the same origin; the snippet ignores other URLs). Empty: the page
	// reloads itself, which in reverse-proxy mode shows the protected page.
	RedirectURL string
}

// DemoPageData fills the demo page.
type DemoPageData struct {
	// BasePath is where the sidecar is mounted, e.g. "/anteroom"; a trailing
	// slash is removed.
	BasePath string
	// Nonce: as WaitingPageData.Nonce.
	Nonce string
	// Gate is the gate to join; empty means "default".
	Gate string
}

// RenderWaitingPage writes the waiting page (HTML, UTF-8) to w. All fields
// are escaped by html/template. The page is rendered into memory first, so
// nothing is written when rendering fails. It returns the template's
// execution error, or the error of w.Write.
func RenderWaitingPage(w io.Writer, data WaitingPageData) error {
	data.BasePath, data.Gate = normalize(data.BasePath, data.Gate)
	return render(w, waitingTmpl, data)
}

// RenderDemoPage writes the demo page (HTML, UTF-8) to w, with the same
// escaping and error behaviour as [RenderWaitingPage].
func RenderDemoPage(w io.Writer, data DemoPageData) error {
	data.BasePath, data.Gate = normalize(data.BasePath, data.Gate)
	return render(w, demoTmpl, data)
}

// AdminPageData fills the operator's dashboard.
type AdminPageData struct {
	// BasePath is where the sidecar is mounted, e.g. "/anteroom"; a trailing
	// slash is removed. The page calls BasePath + "/admin/api/".
	BasePath string
	// Nonce: as WaitingPageData.Nonce.
	Nonce string
}

// RenderAdminPage writes the dashboard (HTML, UTF-8) to w, with the same
// escaping and error behaviour as [RenderWaitingPage]. The page holds no
// secret: it asks the operator for the admin token and keeps it in the
// tab's sessionStorage.
func RenderAdminPage(w io.Writer, data AdminPageData) error {
	data.BasePath = strings.TrimRight(data.BasePath, "/")
	return render(w, adminTmpl, data)
}

func normalize(basePath, gate string) (string, string) {
	basePath = strings.TrimRight(basePath, "/")
	if gate == "" {
		gate = "default"
	}
	return basePath, gate
}

func render(w io.Writer, t *template.Template, data any) error {
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}
