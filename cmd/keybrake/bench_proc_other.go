//go:build !linux

package main

import "os/exec"

// setChildAttrs does nothing where the kernel cannot tie a child's life to
// its parent's: the bench stops its children itself.
func setChildAttrs(cmd *exec.Cmd) {}
