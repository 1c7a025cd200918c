package main

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// setChildAttrs makes the kernel kill a bench child when the bench dies,
// so no simulator or serve outlives a killed bench.
func setChildAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// readProcCPU returns the CPU time (user + system, every thread) a
// process has used so far, from /proc/PID/stat.
func readProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	ticks, err := parseProcStat(b)
	return ticksDuration(ticks), err
}
