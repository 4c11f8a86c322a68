//go:build unix

package pgtest

import "syscall"

// credential is who the server runs as when the tests run as root.
type credential = syscall.Credential
