//go:build !linux

package sqlite

import "os"

// dbFileLockSupported reports whether Open also locks the database file
// itself. Not here: on the BSDs and macOS flock and POSIX locks may
// interact, and SQLite holds POSIX locks on the file. The lock file alone
// guards it.
const dbFileLockSupported = false

func lockDBFile(*os.File, string) error { return nil }
