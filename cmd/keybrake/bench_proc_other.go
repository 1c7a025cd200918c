//go:build !linux

package main

import (
	"errors"
	"os/exec"
	"time"
)

// setChildAttrs does nothing where the kernel cannot tie a child's life to
// its parent's: the bench stops its children itself.
func setChildAttrs(cmd *exec.Cmd) {}

// readProcCPU fails where there is no /proc/PID/stat: the bench reports
// no CPU times.
func readProcCPU(pid int) (time.Duration, error) {
	return 0, errors.New("no /proc/PID/stat on this system")
}
