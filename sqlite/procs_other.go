//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package sqlite

import (
	"errors"
	"os"
)

// announce fails where POSIX record locks are not available: key reports
// are then never taken as synchronous.
func announce(*os.File) (uint64, error) {
	return 0, errors.New("sqlite: no POSIX record locks on this platform")
}

// othersPresent is true: another process cannot be ruled out.
func othersPresent(*os.File) bool { return true }

// posixLocks: no process announces itself, so none is ever alone.
const posixLocks = false

// linkCount is unknown here: never one.
func linkCount(os.FileInfo) uint64 { return 0 }
