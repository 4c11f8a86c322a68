// Package session is anteroom's domain: sessions, their statuses, the typed
// errors, the Store and Publisher interfaces, and the Waitlist service.
//
// The rules of the waiting line live here once, as pure functions (see
// rules.go). A Store runs them inside its own transaction and does only the
// I/O, so every Store applies exactly the same rules and is free to batch many
// operations into one transaction. Among them: no session goes from active
// back to waiting (see rules.go), which Stores may rely on.
//
// The package imports the standard library only.
package session
