package guard

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// Limits of the remote checker's options.
const (
	// DefaultRemoteTimeout bounds each call to the sidecar when
	// RemoteOptions.Timeout is zero.
	DefaultRemoteTimeout = 2 * time.Second
	// MaxCacheTTL is the longest RemoteOptions.CacheTTL accepted: a purged
	// or released session must not be let in for long.
	MaxCacheTTL = time.Second
	// DefaultCacheSize is the most cached answers when
	// RemoteOptions.CacheSize is zero.
	DefaultCacheSize = 10000
)

// maxAnswerBytes bounds how much of the sidecar's answer is read.
const maxAnswerBytes = 4 << 10

// RemoteOptions configure a Remote checker. The zero value of each field
// picks its default.
type RemoteOptions struct {
	// Client makes the calls. Default: a client that does not follow
	// redirects. Whatever its own Timeout, each call is also bounded by
	// Timeout.
	Client *http.Client
	// Timeout bounds each call to the sidecar, so that a sidecar that hangs
	// answers ErrUnavailable instead of holding the request. Default
	// DefaultRemoteTimeout.
	Timeout time.Duration
	// Gate is the gate to check, sent as ?gate=. Default DefaultGate. It is
	// fixed here, never taken from the request.
	Gate string
	// CacheTTL, when positive, caches each answer (allowed, no session,
	// waiting; never "unavailable") per credentials for that long. Default 0:
	// no cache, every check asks the sidecar. At most MaxCacheTTL.
	CacheTTL time.Duration
	// CacheSize bounds the number of cached answers. Default
	// DefaultCacheSize.
	CacheSize int
	// Now tells the time for the cache. Default time.Now; tests pass a fake.
	Now func() time.Time
}

// Remote is the Checker of an app beside an anteroom sidecar: it asks the
// sidecar's GET {base}/check, forwarding the request's tokens (the
// Authorization: Bearer header, ?session= and the CookieName cookies, and
// nothing else of the request). It cannot verify tokens itself: the sidecar
// picks the first that verifies. Safe for concurrent use.
//
// /check always refreshes the session's last activity, so on a Remote
// ValidateSessionIsActive refreshes too: both methods behave the same. With
// a cache, a cached "allowed" answer is not sent to the sidecar, so a
// session's refresh is delayed by at most CacheTTL.
type Remote struct {
	client   *http.Client
	timeout  time.Duration
	gate     string
	checkURL string // {base}/check?gate=...
	cache    *cache
}

var _ Checker = (*Remote)(nil)

// NewRemote returns a Checker that asks the sidecar at baseURL, its base
// path as an absolute URL such as "http://anteroom:8080/anteroom". It
// returns a session.ErrInvalidArgument error when baseURL is not an absolute
// http or https URL without query or fragment, when Gate is not a valid gate
// name, when Timeout or CacheSize is negative, or when CacheTTL is negative or
// longer than MaxCacheTTL.
func NewRemote(baseURL string, opts RemoteOptions) (*Remote, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, session.Errorf(session.CodeInvalidArgument, "guard: NewRemote: base URL %q: %v", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, session.Errorf(session.CodeInvalidArgument, "guard: NewRemote: base URL %q: want http(s)://host[:port]/base-path without query, fragment or user info", baseURL)
	}
	if opts.Gate == "" {
		opts.Gate = DefaultGate
	}
	switch {
	case !session.ValidGateName(opts.Gate):
		return nil, session.Errorf(session.CodeInvalidArgument, "guard: NewRemote: invalid gate name %q", opts.Gate)
	case opts.Timeout < 0:
		return nil, session.Errorf(session.CodeInvalidArgument, "guard: NewRemote: negative Timeout %v", opts.Timeout)
	case opts.CacheTTL < 0 || opts.CacheTTL > MaxCacheTTL:
		return nil, session.Errorf(session.CodeInvalidArgument, "guard: NewRemote: CacheTTL %v: want 0 (off) up to %v", opts.CacheTTL, MaxCacheTTL)
	case opts.CacheSize < 0:
		return nil, session.Errorf(session.CodeInvalidArgument, "guard: NewRemote: negative CacheSize %d", opts.CacheSize)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultRemoteTimeout
	}
	if opts.Client == nil {
		opts.Client = &http.Client{
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/check"
	u.RawPath = ""
	u.RawQuery = url.Values{"gate": {opts.Gate}}.Encode()
	rc := &Remote{client: opts.Client, timeout: opts.Timeout, gate: opts.Gate, checkURL: u.String()}
	if opts.CacheTTL > 0 {
		if opts.CacheSize == 0 {
			opts.CacheSize = DefaultCacheSize
		}
		if opts.Now == nil {
			opts.Now = time.Now
		}
		rc.cache = newCache(opts.CacheTTL, opts.CacheSize, opts.Now)
	}
	return rc, nil
}

// Gate returns the gate checked.
func (c *Remote) Gate() string { return c.gate }

// ValidateSessionIsActive asks the sidecar's /check, which also refreshes the
// session's last activity: it is the same as
// ValidateSessionAndRefreshLastActive. Errors: ErrNoSession (no token, or
// the sidecar answered 401), *NotActiveError with the sidecar's Retry-After
// (403), and session.ErrUnavailable for anything else: a network error, a
// timeout, a 5xx or an unexpected answer (which also matches the sidecar's
// error code when it sent one, such as session.ErrUnknownGate).
func (c *Remote) ValidateSessionIsActive(r *http.Request) error {
	return c.check(r)
}

// ValidateSessionAndRefreshLastActive asks the sidecar's /check, which
// refreshes the session's last activity when it is active. Same errors as
// ValidateSessionIsActive.
func (c *Remote) ValidateSessionAndRefreshLastActive(r *http.Request) error {
	return c.check(r)
}

func (c *Remote) check(r *http.Request) error {
	cred := credentialsOf(r)
	if cred.empty() {
		return ErrNoSession
	}
	var key string
	if c.cache != nil {
		key = cacheKey(c.gate, cred)
		if err, ok := c.cache.get(key); ok {
			return err
		}
	}
	err := c.ask(r.Context(), cred)
	if c.cache != nil && !isUnavailable(err) {
		c.cache.put(key, err)
	}
	return err
}

func (c *Remote) ask(ctx context.Context, cred credentials) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	target := c.checkURL
	if cred.query != "" {
		target += "&" + wire.SessionParam + "=" + url.QueryEscape(cred.query)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return session.Errorf(session.CodeUnavailable, "guard: building the check request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "anteroom-guard")
	if cred.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+cred.bearer)
	}
	for _, v := range cred.cookies { // all of them: the sidecar picks the first that verifies
		req.AddCookie(&http.Cookie{Name: CookieName, Value: v})
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return session.Errorf(session.CodeUnavailable, "guard: asking the sidecar: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return session.Errorf(session.CodeUnavailable, "guard: reading the sidecar's answer: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerBytes)) // let the connection be reused

	var answer wire.ErrorBody
	_ = json.Unmarshal(body, &answer) // a body that is not the contract's leaves the code empty
	code := answer.Error.Code
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusUnauthorized && code == CodeNoSession:
		return ErrNoSession
	case resp.StatusCode == http.StatusForbidden && code == session.CodeNotActive:
		e := &NotActiveError{Gate: c.gate}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			e.RetryAfter = time.Duration(s) * time.Second
		}
		return e
	}
	e := &session.Error{Code: session.CodeUnavailable, Message: "guard: the sidecar answered " + resp.Status}
	if code != "" {
		e.Err = &session.Error{Code: code, Message: answer.Error.Message}
	}
	return e
}

func isUnavailable(err error) bool {
	return err != nil && session.CodeOf(err) == session.CodeUnavailable
}
