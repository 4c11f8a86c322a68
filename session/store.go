package session

import (
	"context"
	"time"
)

// Store persists gates and sessions. It applies the rules of rules.go inside
// its own transactions and does only the I/O; it may batch concurrent
// operations into one transaction. Every method returns an error wrapping
// ErrUnavailable once the Store is closed, ErrInvalidArgument for malformed
// input, and an ErrInternal-coded error for storage failures.
//
// After every commit that changed something, and before any caller of that
// commit is answered, the Store calls the listener given to SetCommitListener
// with what the commit did, in commit order, one call at a time. That is what
// lets the service answer hot reads from memory.
type Store interface {
	// SetCommitListener installs fn, called after each commit (see above).
	// It must be called before any write; fn must not block nor call back
	// into the Store.
	SetCommitListener(fn func(Commit))

	// Load ensures a row exists for each named gate and returns, for each, its
	// state, its active sessions and its persisted settings; it also returns
	// every other gate that has persisted settings (a gate added at runtime).
	// A commit delivered to the listener while Load runs is either Load's
	// own (its state is the snapshot's) or made after the snapshot, never
	// one the snapshot already holds: the Waitlist applies every commit
	// delivered from SetCommitListener on, on top of the snapshot.
	Load(ctx context.Context, gates []string) (map[string]GateSnapshot, error)

	// SaveGateSettings persists settings (a valid GateConfig of that gate)
	// as the gate's runtime settings, which Load returns from then on; nil
	// forgets them. Settings changed at runtime win over the config file's
	// until forgotten.
	//
	// The cfg that Join, Leave, Release, Purge and Update are given is what
	// their caller read: while the gate has runtime settings, a Store
	// decides with those as stored instead, and the gate's stored events
	// over them (EventConfig at the op's now), under the gate's lock; and
	// while a pre-queue is open as stored, it decides with the gate held
	// (PrequeueHold: nobody promoted, a join waits). An op is decided as of
	// its commit, not of its caller's read.
	SaveGateSettings(ctx context.Context, gate string, settings *GateConfig) error

	// Join runs DecideJoin for id in gate cfg.Name at now and returns the
	// session as stored afterwards.
	Join(ctx context.Context, cfg GateConfig, id string, now time.Time) (Session, error)

	// Leave runs DecideLeave. It returns ErrNotFound when the session does not
	// exist (the caller decides whether that is an error).
	Leave(ctx context.Context, cfg GateConfig, id string, now time.Time) (Session, error)

	// Release runs DecideRelease and the promotions it decides, in one
	// transaction. It returns the released row, or ErrNotFound.
	Release(ctx context.Context, cfg GateConfig, id string, now time.Time) (Session, error)

	// Get returns the stored session, or ErrNotFound.
	Get(ctx context.Context, gate, id string) (Session, error)

	// Touch persists coalesced signs of life of one gate's sessions, waiting
	// or active: it runs DecideTouch on each one's row (which only moves
	// last_active forward, and claims only the promotion a touch names).
	// Sessions that no longer exist are skipped, which is not an error.
	// The caller bounds len(touches): the Waitlist sends at most
	// Options.UpdateChunk per call. Besides the errors every method returns
	// (above), it returns ctx's error when ctx ends before the touches are
	// taken up.
	Touch(ctx context.Context, gate string, touches []Touch) error

	// Purge deletes those of the named sessions that StaleReason calls stale
	// at now (others are left alone, absent ones skipped), then promotes
	// PromotionCount waiters into the freed slots, in one transaction. It is
	// how an unclaimed slot passes on at once, without a whole update.
	Purge(ctx context.Context, cfg GateConfig, ids []string, now time.Time) (UpdateReport, error)

	// Update is the cron tick for one gate at now: delete stale waiting
	// sessions (IsStale), delete stale active sessions, then promote waiters
	// in position order up to PromotionCount, each step in transactions of at
	// most chunk rows so that the writer is never held for long. The chunk
	// is the caller's (the Waitlist's Options.UpdateChunk); chunk <= 0 means
	// DefaultUpdateChunk. A Store may let a transaction grow to at most
	// UpdateChunkGrowth × chunk rows while no other operation waits for its
	// writer (fewer, larger transactions when nobody is held by them); it
	// comes back to chunk as soon as one does. A Store whose writer runs
	// one transaction at a time may also end a transaction early once
	// another operation waits for it (UpdateYieldRows, UpdateYieldAfter).
	Update(ctx context.Context, cfg GateConfig, now time.Time, chunk int) (UpdateReport, error)

	// Close flushes and closes the Store. Calls after it return ErrUnavailable.
	Close() error

	// EventStore keeps the gates' scheduled events (events_store.go).
	EventStore
	// HistoryStore: the lifecycle records the Store writes in the
	// transaction of each commit, from its events (HistoryOf).
	HistoryStore
	// CodeStore: priority codes and the priority lane (priority.go).
	CodeStore
	// GateRemover: a gate's removal in one transaction (remove.go).
	GateRemover
	// LinkClaimer: a claim link's claim, exactly once (claimlink.go).
	LinkClaimer
}

// ReadyChecker is implemented by a Store that can tell whether it can serve
// writes now; Waitlist.Ready asks it. A Store without it is taken as ready.
type ReadyChecker interface {
	// Ready returns nil when the Store can write, else an error (with
	// CodeUnavailable) saying why: its storage is full or failing, its file
	// was removed, its server is unreachable. It must be cheap when all is
	// well: it answers readiness probes.
	Ready(ctx context.Context) error
}

// GateSnapshot is a gate's persisted state as loaded at start.
type GateSnapshot struct {
	State  GateState
	Active []Session
	// Waiting holds the positions of the waiting sessions, ascending.
	Waiting []int64
	// PriorityWaiting holds those of Waiting in the priority lane, ascending.
	PriorityWaiting []int64
	// Settings are the gate's persisted runtime settings (SaveGateSettings),
	// nil when never saved or forgotten.
	Settings *GateConfig
	// Events are the gate's scheduled events (EventStore.Events), and
	// DamagedEvents those whose rows do not decode, sorted by id, from a
	// Store that is a DamageReporter.
	Events        []ScheduledEvent
	DamagedEvents []DamagedEvent
}

// Touch is one coalesced sign of life (see DecideTouch).
type Touch struct {
	ID         string
	LastActive time.Time
	// ClaimDeadline, when set, claims the slot of a promoted, unclaimed
	// session, but only of the promotion it names: the claim deadline the
	// sign of life was seen under. A claim deadline names its promotion
	// as a claim link's does (DecideClaimLink), so a sign of life seen
	// while the session held an earlier promotion does not claim a later
	// one. Zero claims nothing.
	ClaimDeadline time.Time
}

// UpdateReport says what one update of one gate did.
type UpdateReport struct {
	Gate          string
	PurgedWaiting int64
	PurgedActive  int64
	Promoted      int64
	Transactions  int
	Duration      time.Duration
}

// EventKind names what happened to an active session in a commit.
type EventKind uint8

// The events a Commit reports: every change to the active set, and every
// session that enters or leaves the line (the service keeps the waiting
// positions in memory to count exact places).
const (
	EventActivated   EventKind = iota + 1 // a new session joined as active
	EventPromoted                         // a waiting session became active (it left the line)
	EventRefreshed                        // an active session's row was rewritten (a refresh, a claim)
	EventDeactivated                      // an active session was released or purged
	EventQueued                           // a new session joined the line as waiting
	EventDequeued                         // a waiting session was released or purged (it left the line)
)

// Event is one change to a gate's active set.
type Event struct {
	Kind    EventKind
	Session Session
	// Reason says why the session left, on EventDeactivated and
	// EventDequeued: Gone, Idle or Unclaimed for a purge (StaleReason),
	// Released for an explicit release. NotStale on other events.
	Reason PurgeReason
	// Claimed is set on an EventRefreshed that claimed a promoted slot (the
	// session's first sign of life after its promotion). The claim itself
	// is the EventClaimed beside it in the same commit, from which both the
	// claimed webhook and the claimed history record are made; this flag
	// only tells commit listeners which refresh it was.
	Claimed bool
	// At is when it happened: the time of the operation that caused it, as
	// the Store was given it. Zero when the operation had no time of its own
	// (a Touch: its time is Session.LastActive), and on events another
	// instance committed.
	At time.Time
}

// Commit is what one committed transaction did: the events in the order they
// happened, and the state after the commit of every gate it touched.
type Commit struct {
	Events []Event
	Gates  map[string]GateState
	// Resync, when set, holds the whole persisted state of the gates it
	// names: a Store shared by several processes that lost track of the
	// others' commits read it from its tables. The listener replaces what it
	// knows of those gates' active sessions with it (Events are then empty;
	// Gates holds the same states).
	Resync map[string]GateSnapshot
	// Settings, when set, holds runtime settings changed by this commit, as
	// a Store that is a SettingsFollower reports them (see there): per gate,
	// the settings now in effect, or nil when they were forgotten. A gate
	// the listener does not know comes with its whole state in Resync.
	Settings map[string]*GateConfig
	// Remote is set on a commit another process made, as a Store shared by
	// several processes reports it (its follower): memory follows it, but
	// per-process counters (metrics) must not count it again.
	Remote bool
}

// Publisher receives what clients must be told. Implementations must not
// block: they are called after each commit, on the Store's commit path.
type Publisher interface {
	// PublishGlobal announces a gate's new global view.
	PublishGlobal(v GlobalView)
	// PublishSession tells one session's clients of a change to it (its
	// promotion).
	PublishSession(v SessionView)
}
