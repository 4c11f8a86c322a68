package gate

import "time"

// EventsAnswerSeams are the test seams of the cache of the snippet's
// events answer (events_answer.go).
type EventsAnswerSeams struct {
	// Missed is called by each request that finds no encoded answer of
	// its gate's published events.
	Missed func(gate string)
	// Encoding is called before each encoding of an answer; it may block
	// to stall it, and its error fails it.
	Encoding func(gate string) error
	// Wait is how long a request waits for another's encoding of the
	// same answer before it encodes in its place; 0: the default.
	Wait time.Duration
}

// SetEventsAnswerSeams installs seams on s. Call it before s serves.
func (s *Server) SetEventsAnswerSeams(seams EventsAnswerSeams) {
	s.eventsAnswers.missed, s.eventsAnswers.encoding, s.eventsAnswers.wait = seams.Missed, seams.Encoding, seams.Wait
}
