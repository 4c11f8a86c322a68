//go:build !unix

package broadcast

import "errors"

// Elsewhere every write goes through net.Conn.Write in the drain path.
const rawWriteSupported = false

func rawWrite(uintptr, []byte) (int, error) { return 0, errors.New("broadcast: no raw writes here") }
