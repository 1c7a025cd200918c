package main

import (
	"os/exec"
	"syscall"
)

// setChildAttrs makes the kernel kill a bench child when the bench dies,
// so no simulator or serve outlives a killed bench.
func setChildAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
