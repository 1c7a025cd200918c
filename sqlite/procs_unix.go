//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlite

import (
	"encoding/binary"
	"io"
	"os"
	"syscall"
)

// announce adds one to the sidecar's counter and takes this process's
// presence lock, returning the counter.
func announce(f *os.File) (uint64, error) {
	fd := f.Fd()
	counter := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart, Start: 0, Len: presenceByte}
	if err := syscall.FcntlFlock(fd, syscall.F_SETLKW, &counter); err != nil {
		return 0, err
	}
	defer func() {
		counter.Type = syscall.F_UNLCK
		syscall.FcntlFlock(fd, syscall.F_SETLK, &counter)
	}()
	n := readCounter(f) + 1
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], n)
	if _, err := f.WriteAt(b[:], 0); err != nil {
		return 0, err
	}
	presence := syscall.Flock_t{Type: syscall.F_RDLCK, Whence: io.SeekStart, Start: presenceByte, Len: 1}
	if err := syscall.FcntlFlock(fd, syscall.F_SETLK, &presence); err != nil {
		return 0, err
	}
	return n, nil
}

// othersPresent reports whether another process holds the file open (a
// lock on its presence byte); true when that cannot be told.
func othersPresent(f *os.File) bool {
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart, Start: presenceByte, Len: 1}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil {
		return true
	}
	return lk.Type != syscall.F_UNLCK
}

// posixLocks: this platform has POSIX record locks, so every process that
// opens a database file must announce itself in its sidecar.
const posixLocks = true

// linkCount is how many names the file of fi has.
func linkCount(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 0
}
