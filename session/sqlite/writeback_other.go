//go:build !linux

package sqlite

// writebackSupported says whether startWriteback does anything here.
const writebackSupported = false

// startWriteback does nothing where sync_file_range is missing: the fsync
// that follows writes all the file's dirty pages itself.
func startWriteback(string, int64) (int64, error) { return 0, nil }

// writebackRefused reports whether err says that sync_file_range is not
// done at all; startWriteback fails nowhere here.
func writebackRefused(error) bool { return false }
