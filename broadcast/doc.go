// Package broadcast is anteroom's websocket hub: it keeps the sockets of the
// clients waiting at each gate and tells them what changed.
//
// A Hub implements session.Publisher. Per gate it sends one global message,
//
//	{"type":"global", ...the GlobalView's fields}
//
// encoded once per change and written, as the same bytes, to every socket of
// the gate. Changes are coalesced: the first change after a quiet window goes
// out at once (leading edge); later changes within Options.Interval are folded
// into one message carrying the latest view, sent when the window ends
// (trailing edge). A view equal to the last one sent is not sent again.
// PublishSession sends {"type":"session", ...the SessionView's fields} to the
// sockets that named that session only.
//
// Per socket the hub keeps a small subscriber: a one-slot mailbox for the
// global message that keeps only the newest (older ones are dropped, never
// queued), and a separate slot for the newest session message (so a
// promotion is never lost behind a later global; it is written before the
// global). It keeps the gate, the session id and the client, and nothing of
// the upgrade's request.
//
// One goroutine serves a socket: its reader (the goroutine that called
// Serve, or one of the hub's after Handoff), which handles control frames
// (ping, pong, close) and closes the socket with StatusPolicyViolation on
// any data message, since the protocol is server → client only. Nothing
// per socket writes. The hub writes every message itself, pre-framed (a
// server frame is unmasked, so a global message is the same bytes for every
// socket), from a few writer goroutines per hub (2 × GOMAXPROCS): a fan-out
// hands them the gate's subscribers in batches, and each socket gets one
// non-blocking send(2) of those bytes: no context, timer, wake-up or
// goroutine per write. A socket that cannot take a write at once (its send
// buffer is full) keeps what is left in a pending buffer and gets a drain
// goroutine of its own, which waits for the socket with a write deadline;
// meanwhile the writers skip it and its mailbox keeps only the newest, and
// once drained it is written what the mailbox kept. A socket still not
// drained after Options.WriteTimeout is closed, so a slow client never
// holds up a writer or the others, and never accumulates a backlog.
//
// Every byte a socket gets goes through that one per-socket write, whole
// frames at a time, so frames never interleave. The hub frames its
// messages, its pings and its pongs itself (package wsframe: final,
// unmasked server frames); it answers a client's ping itself, telling
// coder/websocket not to (OnPingReceived returns false). What the library
// still writes (close frames: its close handshake, its protocol-error
// closes) reaches the socket only through the bufio.Writer and net.Conn
// the hub's Hijack gave it, both of which feed a wsframe.Splitter that
// cuts the stream into whole frames, however the library buffers it; a
// frame over 125 bytes of payload, or not framed as RFC 6455 says, ends
// the socket. The library's close of the connection waits until the bytes
// owed to the socket are out. Under TLS (or any connection that is not a
// plain socket) there is no non-blocking write: every write takes the
// drain path. A backed-up socket may owe at most 64 KiB (what one write
// left, plus control frames); past that it is closed as slow, so a client
// that pings a socket it never reads cannot make the hub buffer pongs
// without end.
//
// One goroutine per hub pings every socket every PingInterval (each on
// its own schedule) and closes those whose pong is more than WriteTimeout
// late.
//
// Handoff returns from the HTTP handler once the socket is up, which frees
// the server's goroutine and buffers: about 8.5 KB per socket (heap and
// stack, measured server side with 19,000 sockets) instead of about 16 KB
// with two goroutines per socket.
//
// Publishing never blocks on sockets: PublishGlobal stores the view and wakes
// the gate's fan-out goroutine (one per gate); PublishSession swaps a pointer
// into the mailboxes of that session's sockets and queues them for the
// writers ahead of any fan-out.
package broadcast
