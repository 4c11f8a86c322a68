package gate

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"
)

// The dashboard's live feed: GET {base}/admin/api/feed?ticket=... is a
// websocket that sends the answer of GET gates whenever it changes (looked
// at every second, so at most once a second) and at least every
// feedHeartbeat (the charts go on, a dead socket is noticed).
//
// A browser's WebSocket cannot send Authorization, so the page first asks
// POST {base}/admin/api/feed/ticket with the Bearer token for a ticket: valid
// feedTicketTTL, for this feed only, usable once. The ticket is
// "<exp>.<nonce>.<mac>", the mac an HMAC-SHA256 keyed by the admin token's
// digest, so every instance with the same admin_token accepts it (once per
// instance: the used nonces are remembered per process until they expire).
// Putting the token itself in Sec-WebSocket-Protocol was the other way: it
// would send the long-lived secret on every handshake, in a header that
// proxies log and the server must echo back; a ticket leaks at most one
// short-lived, single-use, read-only feed.

const (
	feedTicketTTL = 30 * time.Second
	feedInterval  = time.Second
	feedHeartbeat = 15 * time.Second
	feedWriteWait = 5 * time.Second
	// feedMaxConns bounds the open feeds of one process, and feedMaxUsed the
	// nonces remembered (tickets issued in a TTL, at the admin rate limit).
	feedMaxConns = 32
	feedMaxUsed  = 4096
	// feedTicketDomain separates the feed ticket's MAC from any other use
	// of the key.
	feedTicketDomain = "anteroom admin feed ticket\x00"
)

// adminFeed is the feed's state: its key, the nonces already used, the
// open connections.
type adminFeed struct {
	key  [sha256.Size]byte
	now  func() time.Time
	mu   sync.Mutex
	used map[string]int64 // nonce -> expiry (unix seconds)
	open int
}

func newAdminFeed(tokenDigest [sha256.Size]byte) *adminFeed {
	return &adminFeed{key: sha256.Sum256(append([]byte(feedTicketDomain), tokenDigest[:]...)), now: time.Now, used: map[string]int64{}}
}

func (f *adminFeed) mac(exp, nonce string) string {
	h := hmac.New(sha256.New, f.key[:])
	h.Write([]byte(feedTicketDomain))
	h.Write([]byte(exp + "." + nonce))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// issue returns a new ticket.
func (f *adminFeed) issue() (string, error) {
	var n [16]byte
	if _, err := rand.Read(n[:]); err != nil {
		return "", err
	}
	exp := strconv.FormatInt(f.now().Add(feedTicketTTL).Unix(), 10)
	nonce := base64.RawURLEncoding.EncodeToString(n[:])
	return exp + "." + nonce + "." + f.mac(exp, nonce), nil
}

// redeem reports whether t is a ticket of this feed, unexpired and not used
// before on this process, and marks it used.
func (f *adminFeed) redeem(t string) bool {
	if len(t) > 128 {
		return false
	}
	parts := strings.Split(t, ".")
	if len(parts) != 3 {
		return false
	}
	exp, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || parts[0] != strconv.FormatInt(exp, 10) {
		return false
	}
	if !hmac.Equal([]byte(parts[2]), []byte(f.mac(parts[0], parts[1]))) {
		return false
	}
	now := f.now().Unix()
	if now > exp || exp-now > int64(feedTicketTTL/time.Second)+1 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, e := range f.used {
		if e < now {
			delete(f.used, k)
		}
	}
	if _, dup := f.used[parts[1]]; dup || len(f.used) >= feedMaxUsed {
		return false
	}
	// Kept until it expires: a copy, not a piece of the request's line.
	f.used[strings.Clone(parts[1])] = exp
	return true
}

func (f *adminFeed) acquire() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open >= feedMaxConns {
		return false
	}
	f.open++
	return true
}

func (f *adminFeed) release() {
	f.mu.Lock()
	f.open--
	f.mu.Unlock()
}

// feedTicketResponse answers POST feed/ticket.
type feedTicketResponse struct {
	Ticket    string `json:"ticket"`
	ExpiresIn int    `json:"expiresIn"` // seconds
}

// adminFeedTicket issues a feed ticket to a caller holding the admin token
// (the route's middleware checked it).
func (s *Server) adminFeedTicket(c echo.Context) error {
	t, err := s.feed.issue()
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, feedTicketResponse{Ticket: t, ExpiresIn: int(feedTicketTTL / time.Second)})
}

// adminFeedSocket is GET feed: origin first (the sidecar's own or
// allowed_origins, so that another site's page cannot use a ticket it got
// hold of), then the ticket, then the handshake.
func (s *Server) adminFeedSocket(c echo.Context) error {
	r := c.Request()
	if !s.origins.allowed(r) {
		return apiError(codeCrossOrigin, "the admin feed is not open to pages of this origin (allowed_origins)")
	}
	if !s.feed.redeem(query(c, "ticket")) {
		return apiError(codeInvalidTicket, "feed ticket missing, invalid, used or expired: ask POST feed/ticket for a new one")
	}
	if !s.feed.acquire() {
		return apiError(codeRateLimited, "too many admin feeds are open")
	}
	defer s.feed.release()
	// The origin was checked above, with allowed_origins.
	conn, err := websocket.Accept(c.Response(), r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return nil // Accept answered
	}
	defer conn.CloseNow()
	conn.SetReadLimit(512)
	ctx := conn.CloseRead(context.Background()) // done when the client closes or sends data
	tick := time.NewTicker(feedInterval)
	defer tick.Stop()
	var last []byte
	var sent time.Time
	for {
		body, err := s.adminGatesJSON()
		if err != nil {
			conn.Close(websocket.StatusInternalError, "cannot read the gates")
			return nil
		}
		if !bytes.Equal(body, last) || time.Since(sent) >= feedHeartbeat {
			wctx, cancel := context.WithTimeout(ctx, feedWriteWait)
			err := conn.Write(wctx, websocket.MessageText, body)
			cancel()
			if err != nil {
				return nil
			}
			last, sent = body, time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// adminGatesJSON is the body of GET gates.
func (s *Server) adminGatesJSON() ([]byte, error) {
	g, err := s.adminGates()
	if err != nil {
		return nil, err
	}
	return json.Marshal(g)
}
