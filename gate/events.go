package gate

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// Scheduled events over HTTP: the public schedule, commitment and, after the
// start, the lottery's seed and pre-queue (GET {base}/api/events?gate=), and
// the admin API's events of a gate ({base}/admin/api/gates/{gate}/events).
// It translates; session decides (events.go, events_waitlist.go).

// events answers GET {base}/api/events?gate=[&positions=0] (see
// wire.PositionsParam). It reads memory only, never the store, and the
// snippet's answer (positions=0) costs the same whatever the size of the
// line and the number of events: it is encoded once per change of the
// gate's published events (events_answer.go). The route is outside the
// per-IP limit of the client API, like /check, because at an event's start
// every visitor behind one address (a NAT, a proxy) asks for it at once.
// The full answer, which carries a started event's whole pre-queue and so
// grows with the line, spends from that limit, and is cached likewise: a
// copy per request stayed in memory for as long as its client took to
// read it.
func (s *Server) events(c echo.Context) error {
	full := query(c, wire.PositionsParam) != "0"
	if full {
		if err := s.allowJoin(c); err != nil {
			return err
		}
	}
	gate := s.gateOf(c, "")
	now := s.opts.Waitlist.Now()
	view, err := s.opts.Waitlist.PublishedEvents(gate, now)
	if err != nil {
		s.eventsAnswers.forget(gate)
		s.fullEventsAnswers.forget(gate)
		return err
	}
	answers := &s.eventsAnswers
	if full {
		answers = &s.fullEventsAnswers
	}
	if ok, err := answers.write(c, gate, view, now); ok {
		return err
	}
	return writeJSON(c, http.StatusOK, publicEvents(gate, view, now, full))
}

func eventsView(gate string, evs []session.ScheduledEvent, now time.Time) wire.EventsView {
	out := wire.EventsView{Gate: gate, Now: now.UTC(), Events: make([]wire.EventView, 0, len(evs))}
	for _, ev := range evs {
		out.Events = append(out.Events, wire.NewEventView(ev, now))
	}
	return out
}

// adminEvent is the body of POST gates/{gate}/events (id required) and PUT
// gates/{gate}/events/{event}: times in RFC 3339.
type adminEvent struct {
	ID                *string `json:"id"`
	PrequeueAt        *string `json:"prequeueAt"`
	StartsAt          *string `json:"startsAt"`
	EndsAt            *string `json:"endsAt"`
	Shuffle           *bool   `json:"shuffle"`
	ActiveLimit       *int64  `json:"activeLimit"`
	NewUsersPerMinute *int64  `json:"newUsersPerMinute"`
}

// eventRoutes registers the admin API's event routes under b with mw.
func (s *Server) eventRoutes(e *echo.Echo, b string, mw []echo.MiddlewareFunc) {
	e.GET(b+"/gates/:gate/events", s.adminListEvents, mw...)
	e.POST(b+"/gates/:gate/events", s.adminAddEvent, mw...)
	e.PUT(b+"/gates/:gate/events/:event", s.adminReplaceEvent, mw...)
	e.DELETE(b+"/gates/:gate/events/:event", s.adminRemoveEvent, mw...)
}

func (s *Server) adminListEvents(c echo.Context) error {
	gate := c.Param("gate")
	evs, err := s.opts.Waitlist.Events(gate)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, eventsView(gate, evs, s.opts.Waitlist.Now()))
}

// readEvent reads and checks an event body for gate; id is the path's
// (PUT) or "" (POST: the body's).
func (s *Server) readEvent(c echo.Context, gate, id string) (session.ScheduledEvent, error) {
	if _, err := s.opts.Waitlist.GateConfig(gate); err != nil {
		return session.ScheduledEvent{}, err
	}
	body, err := s.readBody(c.Request())
	if err != nil {
		return session.ScheduledEvent{}, err
	}
	var p adminEvent
	if err := decodeOne(body, &p, "a JSON object of event settings"); err != nil {
		return session.ScheduledEvent{}, err
	}
	bad := func(field, want string) error {
		return apiError(session.CodeInvalidArgument, field+": "+want)
	}
	ev := session.ScheduledEvent{Gate: gate, ID: id}
	switch {
	case id == "" && p.ID == nil:
		return ev, bad("id", "required")
	case id == "":
		ev.ID = *p.ID
	case p.ID != nil && *p.ID != id:
		return ev, bad("id", "an event cannot be renamed")
	}
	if !session.ValidGateName(ev.ID) {
		return ev, bad("id", "want 1-64 characters of a-z, A-Z, 0-9, '-', '_' or '.'")
	}
	times := []struct {
		field    string
		v        *string
		dst      *time.Time
		required bool
	}{
		{"prequeueAt", p.PrequeueAt, &ev.PrequeueAt, true},
		{"startsAt", p.StartsAt, &ev.StartsAt, true},
		{"endsAt", p.EndsAt, &ev.EndsAt, false},
	}
	for _, t := range times {
		if t.v == nil {
			if t.required {
				return ev, bad(t.field, "required (RFC 3339)")
			}
			continue
		}
		v, err := time.Parse(time.RFC3339Nano, *t.v)
		if err != nil || v.Year() < 2000 || v.Year() > 9999 {
			return ev, bad(t.field, `want an RFC 3339 time such as "2026-11-24T18:00:00Z"`)
		}
		*t.dst = v.UTC()
	}
	if p.Shuffle != nil {
		ev.Shuffle = *p.Shuffle
	}
	ev.ActiveLimit, ev.NewUsersPerMinute = p.ActiveLimit, p.NewUsersPerMinute
	return ev, nil
}

func (s *Server) adminAddEvent(c echo.Context) error {
	ev, err := s.readEvent(c, c.Param("gate"), "")
	if err != nil {
		return err
	}
	saved, err := s.opts.Waitlist.AddEvent(c.Request().Context(), ev)
	if err != nil {
		return err
	}
	s.log.Info("anteroom: event added through the admin API", "gate", ev.Gate, "event", ev.ID, "client", c.RealIP())
	return writeJSON(c, http.StatusCreated, wire.NewEventView(saved, s.opts.Waitlist.Now()))
}

func (s *Server) adminReplaceEvent(c echo.Context) error {
	ev, err := s.readEvent(c, c.Param("gate"), c.Param("event"))
	if err != nil {
		return err
	}
	saved, err := s.opts.Waitlist.ReplaceEvent(c.Request().Context(), ev)
	if err != nil {
		return err
	}
	s.log.Info("anteroom: event changed through the admin API", "gate", ev.Gate, "event", ev.ID, "client", c.RealIP())
	return writeJSON(c, http.StatusOK, wire.NewEventView(saved, s.opts.Waitlist.Now()))
}

func (s *Server) adminRemoveEvent(c echo.Context) error {
	gate, id := c.Param("gate"), c.Param("event")
	if err := s.opts.Waitlist.RemoveEvent(c.Request().Context(), gate, id); err != nil {
		return err
	}
	s.log.Info("anteroom: event removed through the admin API", "gate", gate, "event", id, "client", c.RealIP())
	return c.NoContent(http.StatusNoContent)
}
