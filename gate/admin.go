package gate

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/static"
)

// The admin API, under {base}/admin/api/: JSON, authorised by
// "Authorization: Bearer <admin_token>" only (no cookie, so no CSRF), rate
// limited per client before the token is even compared. Without an admin
// token every admin path answers 404. It translates HTTP to the Waitlist's
// runtime operations (session/runtime.go), which decide.

// MinAdminTokenLength is the shortest admin token accepted.
const MinAdminTokenLength = 32

// defaultAdminRateLimit bounds admin requests per client: plenty for an
// operator's dashboard, nothing for a token guesser.
var defaultAdminRateLimit = RateLimitOptions{PerSecond: 10, Burst: 30}

// codeAdminTokenRequired is the 401 of the admin API (wire).
const codeAdminTokenRequired = wire.CodeAdminTokenRequired

// adminRoutes registers the admin API, or, without a token, a 404 for every
// admin path (also in proxy mode, where the catch-all would otherwise send
// them to the app).
func (s *Server) adminRoutes(e *echo.Echo) error {
	page := s.opts.BasePath + "/admin"
	b := page + "/api"
	if s.opts.AdminToken == "" {
		off := func(echo.Context) error { return apiError(codeRouteNotFound, "not found") }
		e.Any(b, off)
		e.Any(b+"/*", off)
		e.Any(page, off)
		e.Any(page+"/", off)
		return nil
	}
	if len(s.opts.AdminToken) < MinAdminTokenLength {
		return errors.New("gate: the admin token must be at least 32 characters")
	}
	sum := sha256.Sum256([]byte(s.opts.AdminToken))
	s.adminToken = &sum
	s.feed = newAdminFeed(sum)
	rl := s.opts.AdminRateLimit
	if rl.PerSecond <= 0 {
		rl = defaultAdminRateLimit
	}
	s.adminLimit = rateLimit(rl)
	mw := []echo.MiddlewareFunc{noStore, s.adminLimit, s.adminAuth, unescapeParams}
	// The dashboard is public HTML without a secret: it asks for the token
	// and calls the API with it.
	getHead := []string{http.MethodGet, http.MethodHead}
	e.Match(getHead, page+"/", s.adminPage)
	e.Match(getHead, page, func(c echo.Context) error { return c.Redirect(http.StatusFound, page+"/") })
	e.GET(b+"/gates", s.adminListGates, mw...)
	e.POST(b+"/gates", s.adminAddGate, mw...)
	e.GET(b+"/gates/:gate", s.adminGetGate, mw...)
	e.PATCH(b+"/gates/:gate", s.adminPatchGate, mw...)
	e.DELETE(b+"/gates/:gate", s.adminRemoveGate, mw...)
	e.DELETE(b+"/gates/:gate/settings", s.adminResetGate, mw...)
	e.DELETE(b+"/gates/:gate/sessions/:session", s.adminEndSession, mw...)
	s.eventRoutes(e, b, mw)
	e.GET(b+"/gates/:gate/history", s.adminHistory, mw...)
	e.POST(b+"/feed/ticket", s.adminFeedTicket, mw...)
	e.GET(b+"/feed", s.adminFeedSocket, mw[:2]...) // a ticket, not the token (adminfeed.go)
	s.adminCodeRoutes(e, b, mw)
	// Anything else under the API: authorised first, so that an outsider
	// cannot map the routes.
	e.Any(b, func(echo.Context) error { return apiError(codeRouteNotFound, "no such admin route") }, mw...)
	e.Any(b+"/*", func(echo.Context) error { return apiError(codeRouteNotFound, "no such admin route") }, mw...)
	return nil
}

// adminPage serves the dashboard under a fresh CSP nonce.
func (s *Server) adminPage(c echo.Context) error {
	var buf bytes.Buffer
	data := static.AdminPageData{BasePath: s.opts.BasePath, Nonce: contentSecurityPolicy(c)}
	if err := static.RenderAdminPage(&buf, data); err != nil {
		return err
	}
	c.Response().Header().Set("Referrer-Policy", "no-referrer")
	return htmlPage(c, buf.Bytes())
}

// adminAuth lets through requests whose Bearer token is the admin token,
// compared in constant time (of equal-length digests, so the token's length
// does not leak either).
func (s *Server) adminAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		tok := wire.BearerToken(c.Request().Header)
		sum := sha256.Sum256([]byte(tok))
		if tok == "" || subtle.ConstantTimeCompare(sum[:], s.adminToken[:]) != 1 {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="anteroom admin"`)
			return apiError(codeAdminTokenRequired, "the admin API needs Authorization: Bearer <admin_token>")
		}
		return next(c)
	}
}

// AdminSettings are a gate's settings as the admin API shows them;
// durations are Go duration strings ("5m0s").
type AdminSettings struct {
	ActiveLimit         int64        `json:"activeLimit"`
	ActiveTimeout       string       `json:"activeTimeout"`
	WaitingTimeout      string       `json:"waitingTimeout"`
	ClaimTimeout        string       `json:"claimTimeout"`
	ReleaseOnDisconnect string       `json:"releaseOnDisconnect"`
	NewUsersPerMinute   int64        `json:"newUsersPerMinute"`
	Mode                session.Mode `json:"mode"`
	// NotifyClaimTimeout is the claim window of a called-back session;
	// AdmissionTokenTTL the lifetime of the gate's admission tokens ("0s":
	// none; tokens need admission_token on some configured gate).
	NotifyClaimTimeout string `json:"notifyClaimTimeout"`
	AdmissionTokenTTL  string `json:"admissionTokenTtl"`
}

// AdminGate is one gate as GET gates shows it: its settings and live state.
type AdminGate struct {
	Name     string        `json:"name"`
	Settings AdminSettings `json:"settings"`
	// SettingsSource is "runtime" when the settings were changed through
	// the admin API (they win over the config file until reset), else
	// "file".
	SettingsSource string `json:"settingsSource"`
	// Mode and Limit are those in effect now: a scheduled event's pre-queue
	// reads queue_all and a running event's limit override is shown (the
	// configured ones are under Settings).
	Mode    session.Mode `json:"mode"`
	Active  int64        `json:"active"`
	Waiting int64        `json:"waiting"`
	Limit   int64        `json:"limit"`
	// OverLimit: more sessions are active than the (lowered) limit; nobody
	// new gets in until active falls below it.
	OverLimit            bool    `json:"overLimit"`
	FirstWaitingPosition int64   `json:"firstWaitingPosition"`
	LastWaitingPosition  int64   `json:"lastWaitingPosition"`
	JoinsPerMinute       float64 `json:"joinsPerMinute"`
	AdmissionsPerMinute  float64 `json:"admissionsPerMinute"`
	AdmittedPerMinute    float64 `json:"admittedPerMinute"`
	// WaitP50Seconds and WaitP90Seconds are the median and 90th percentile
	// of the time from join to admission over the last hour (direct
	// admissions count as 0), null when nobody was admitted in it.
	WaitP50Seconds *float64 `json:"waitP50Seconds"`
	WaitP90Seconds *float64 `json:"waitP90Seconds"`
	// AbandonsPerMinute counts waiters who gave up before they were
	// admitted (purged or released while waiting, or promoted and never
	// claimed) over the last five minutes.
	AbandonsPerMinute float64 `json:"abandonsPerMinute"`
	// DamagedEvents are the gate's stored events that do not decode (left
	// out of everything; one that holds the gate admits nobody new until
	// it is deleted), never null.
	DamagedEvents []AdminDamagedEvent `json:"damagedEvents"`
}

// AdminDamagedEvent is a stored event that does not decode
// (session.DamagedEvent).
type AdminDamagedEvent struct {
	ID    string `json:"id"`
	Holds bool   `json:"holds"`
	Error string `json:"error"`
}

// AdminGates is the answer of GET gates.
type AdminGates struct {
	Gates []AdminGate `json:"gates"`
}

func adminGateOf(st session.GateStats) AdminGate {
	c := st.Config
	mode := c.Mode
	if mode == "" {
		mode = session.ModeOpen
	}
	// The live figures are those in effect (a scheduled event's hold or
	// overrides); Settings are the configured ones that PATCH changes.
	live := mode
	if st.Effective.Name != "" && st.Effective.Mode != "" {
		live = st.Effective.Mode
	}
	src := "file"
	if st.Runtime {
		src = "runtime"
	}
	return AdminGate{
		Name: c.Name,
		Settings: AdminSettings{
			ActiveLimit:         c.ActiveLimit,
			ActiveTimeout:       c.ActiveTimeout.String(),
			WaitingTimeout:      c.WaitingTimeout.String(),
			ClaimTimeout:        c.ClaimTimeout.String(),
			ReleaseOnDisconnect: c.ReleaseOnDisconnect.String(),
			NewUsersPerMinute:   c.NewUsersPerMinute,
			Mode:                mode,
			NotifyClaimTimeout:  session.ClaimWindow(c, session.Session{Notify: true}).String(),
			AdmissionTokenTTL:   c.AdmissionTTL.String(),
		},
		SettingsSource:       src,
		Mode:                 live,
		Active:               st.View.Active,
		Waiting:              st.View.AllWaiting(), // both lanes
		Limit:                st.View.Limit,
		OverLimit:            st.View.Active > st.View.Limit,
		FirstWaitingPosition: st.View.FirstWaitingPosition,
		LastWaitingPosition:  st.View.LastWaitingPosition,
		JoinsPerMinute:       st.JoinsPerMinute,
		AdmissionsPerMinute:  st.AdmissionsPerMinute,
		AdmittedPerMinute:    st.View.AdmittedPerMinute,
		WaitP50Seconds:       waitSeconds(st.Waits, st.Waits.P50),
		WaitP90Seconds:       waitSeconds(st.Waits, st.Waits.P90),
		AbandonsPerMinute:    st.Waits.AbandonsPerMinute,
		DamagedEvents:        adminDamaged(st.DamagedEvents),
	}
}

func adminDamaged(list []session.DamagedEvent) []AdminDamagedEvent {
	out := make([]AdminDamagedEvent, 0, len(list))
	for _, d := range list {
		out = append(out, AdminDamagedEvent{ID: d.ID, Holds: d.Holds, Error: d.Err})
	}
	return out
}

func (s *Server) adminListGates(c echo.Context) error {
	out, err := s.adminGates()
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, out)
}

// adminGates is the answer of GET gates (and what the feed sends).
func (s *Server) adminGates() (AdminGates, error) {
	out := AdminGates{Gates: []AdminGate{}}
	for _, name := range s.opts.Waitlist.Gates() {
		st, err := s.opts.Waitlist.Stats(name)
		if errors.Is(err, session.ErrUnknownGate) {
			continue // removed meanwhile
		}
		if err != nil {
			return out, err
		}
		out.Gates = append(out.Gates, adminGateOf(st))
	}
	return out, nil
}

func (s *Server) adminGate(c echo.Context, status int, name string) error {
	st, err := s.opts.Waitlist.Stats(name)
	if err != nil {
		return err
	}
	return writeJSON(c, status, adminGateOf(st))
}

func (s *Server) adminGetGate(c echo.Context) error {
	return s.adminGate(c, http.StatusOK, c.Param("gate"))
}

// adminPatch is the body of PATCH gates/{gate} and POST gates: every field
// optional (absent: unchanged, or for POST the default gate's value).
type adminPatch struct {
	Name                *string `json:"name"`
	ActiveLimit         *int64  `json:"activeLimit"`
	ActiveTimeout       *string `json:"activeTimeout"`
	WaitingTimeout      *string `json:"waitingTimeout"`
	ClaimTimeout        *string `json:"claimTimeout"`
	ReleaseOnDisconnect *string `json:"releaseOnDisconnect"`
	NewUsersPerMinute   *int64  `json:"newUsersPerMinute"`
	Mode                *string `json:"mode"`
	NotifyClaimTimeout  *string `json:"notifyClaimTimeout"`
	AdmissionTokenTTL   *string `json:"admissionTokenTtl"`
}

// maxAdminDuration bounds the durations the admin API accepts.
const maxAdminDuration = 30 * 24 * time.Hour

// readPatch reads a JSON object of adminPatch's fields, refusing unknown
// fields, trailing data and bodies over the limit.
func (s *Server) readPatch(c echo.Context) (adminPatch, error) {
	var p adminPatch
	body, err := s.readBody(c.Request())
	if err != nil {
		return p, err
	}
	return p, decodeOne(body, &p, "a JSON object of gate settings")
}

// applyPatch returns cfg with p's fields set, or an invalid_argument error
// naming the first field that is out of range.
func applyPatch(cfg session.GateConfig, p adminPatch) (session.GateConfig, error) {
	bad := func(field, want string) error {
		return apiError(session.CodeInvalidArgument, field+": "+want)
	}
	if p.ActiveLimit != nil {
		if *p.ActiveLimit < 0 {
			return cfg, bad("activeLimit", "must not be negative")
		}
		cfg.ActiveLimit = *p.ActiveLimit
	}
	durations := []struct {
		field    string
		v        *string
		dst      *time.Duration
		positive bool
	}{
		{"activeTimeout", p.ActiveTimeout, &cfg.ActiveTimeout, true},
		{"waitingTimeout", p.WaitingTimeout, &cfg.WaitingTimeout, true},
		{"claimTimeout", p.ClaimTimeout, &cfg.ClaimTimeout, false},
		{"releaseOnDisconnect", p.ReleaseOnDisconnect, &cfg.ReleaseOnDisconnect, false},
		{"notifyClaimTimeout", p.NotifyClaimTimeout, &cfg.NotifyClaimTimeout, false},
		{"admissionTokenTtl", p.AdmissionTokenTTL, &cfg.AdmissionTTL, false},
	}
	for _, d := range durations {
		if d.v == nil {
			continue
		}
		v, err := time.ParseDuration(*d.v)
		switch {
		case err != nil:
			return cfg, bad(d.field, `want a Go duration such as "90s" or "5m"`)
		case d.positive && v <= 0:
			return cfg, bad(d.field, "must be positive")
		case v < 0:
			return cfg, bad(d.field, "must not be negative (0 turns it off)")
		case v > maxAdminDuration:
			return cfg, bad(d.field, "must be at most 720h")
		}
		*d.dst = v
	}
	if p.NewUsersPerMinute != nil {
		if *p.NewUsersPerMinute < 0 || *p.NewUsersPerMinute > session.MaxNewUsersPerMinute {
			return cfg, bad("newUsersPerMinute", "must be 0 (no pacing) or a positive number of admissions per minute")
		}
		cfg.NewUsersPerMinute = *p.NewUsersPerMinute
	}
	if p.Mode != nil {
		m := session.Mode(*p.Mode)
		if m == "" || !m.Valid() {
			return cfg, bad("mode", "want open, queue_all or reject")
		}
		cfg.Mode = m
	}
	if cfg.AdmissionTTL != 0 && (cfg.AdmissionTTL < time.Second || cfg.AdmissionTTL > session.MaxAdmissionTTL) {
		return cfg, bad("admissionTokenTtl", "must be 0 (no admission tokens) or from 1s to 24h")
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

func (s *Server) adminPatchGate(c echo.Context) error {
	name := c.Param("gate")
	cfg, err := s.opts.Waitlist.GateConfig(name)
	if err != nil {
		return err
	}
	p, err := s.readPatch(c)
	if err != nil {
		return err
	}
	if p.Name != nil && *p.Name != name {
		return apiError(session.CodeInvalidArgument, "name: a gate cannot be renamed")
	}
	if cfg, err = applyPatch(cfg, p); err != nil {
		return err
	}
	if _, err := s.opts.Waitlist.SetGateConfig(c.Request().Context(), cfg); err != nil {
		return err
	}
	s.log.Info("anteroom: gate settings changed through the admin API", "gate", name, "settings", cfg.String(), "client", c.RealIP())
	return s.adminGate(c, http.StatusOK, name)
}

func (s *Server) adminAddGate(c echo.Context) error {
	p, err := s.readPatch(c)
	if err != nil {
		return err
	}
	if p.Name == nil {
		return apiError(session.CodeInvalidArgument, "name: required")
	}
	name := *p.Name
	if !session.ValidGateName(name) || strings.Trim(name, ".") == "" {
		return apiError(session.CodeInvalidArgument, "name: want 1-64 characters of a-z, A-Z, 0-9, '-', '_' or '.', not only dots")
	}
	// Omitted settings are the default gate's, in open mode without pacing.
	base, err := s.opts.Waitlist.GateConfig(s.opts.DefaultGate)
	if err != nil {
		base = session.GateConfig{ActiveLimit: 0, ActiveTimeout: 5 * time.Minute, WaitingTimeout: 5 * time.Minute}
	}
	base.Name, base.Mode, base.NewUsersPerMinute = name, session.ModeOpen, 0
	cfg, err := applyPatch(base, p)
	if err != nil {
		return err
	}
	if err := s.opts.Waitlist.AddGate(c.Request().Context(), cfg); err != nil {
		return err
	}
	s.log.Info("anteroom: gate added through the admin API", "gate", name, "settings", cfg.String(), "client", c.RealIP())
	return s.adminGate(c, http.StatusCreated, name)
}

func (s *Server) adminRemoveGate(c echo.Context) error {
	name := c.Param("gate")
	// The gate requests that name none fall back to, and the one
	// reverse-proxy mode guards, stay: without them the page, the snippet
	// and the whole proxied site would answer unknown_gate until a restart.
	if name == s.opts.DefaultGate || (s.proxy != nil && name == s.proxy.opts.Gate) {
		return apiError(session.CodeGateInUse, "gate "+name+" cannot be removed: requests that name no gate, and reverse-proxy mode, use it")
	}
	if err := s.opts.Waitlist.RemoveGate(c.Request().Context(), name); err != nil {
		return err
	}
	s.log.Info("anteroom: gate removed through the admin API", "gate", name, "client", c.RealIP())
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) adminResetGate(c echo.Context) error {
	name := c.Param("gate")
	if _, err := s.opts.Waitlist.ResetGateConfig(c.Request().Context(), name); err != nil {
		return err
	}
	s.log.Info("anteroom: gate settings reset to the config file's through the admin API", "gate", name, "client", c.RealIP())
	return s.adminGate(c, http.StatusOK, name)
}

// unescapeParams percent-decodes the route's path parameters. echo routes
// on the request's raw path when it has one (an escape the plain path
// cannot show: "user%3A42", "user%2F42") and hands the parameters over as
// sent, so without this DELETE sessions/user%3A42 would end nobody. A path
// without a raw form was decoded already and is left alone (a '%' in it is
// the id's). A malformed escape is a 400 invalid_argument.
func unescapeParams(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if c.Request().URL.RawPath == "" {
			return next(c)
		}
		names, values := c.ParamNames(), c.ParamValues()
		decoded := make([]string, len(values))
		for i, v := range values {
			u, err := url.PathUnescape(v)
			if err != nil {
				return apiError(session.CodeInvalidArgument, names[i]+": malformed percent-escape in the path")
			}
			decoded[i] = u
		}
		c.SetParamValues(decoded...)
		return next(c)
	}
}

// adminEndSession ends a session (Release): when it was active its slot
// goes to the next waiter in the same commit. Ending a session that does
// not exist is not an error (204 as well), so the call can be repeated.
func (s *Server) adminEndSession(c echo.Context) error {
	name, id := c.Param("gate"), c.Param("session")
	if _, err := s.opts.Waitlist.GateConfig(name); err != nil {
		return err
	}
	if !session.ValidID(id) {
		return apiError(session.CodeInvalidArgument, "session: want 1-128 printable ASCII characters without spaces or '.'")
	}
	if err := s.opts.Waitlist.Release(c.Request().Context(), name, id); err != nil {
		return err
	}
	s.log.Info("anteroom: session ended through the admin API", "gate", name, "session", id, "client", c.RealIP())
	return c.NoContent(http.StatusNoContent)
}
