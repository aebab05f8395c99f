//go:build !linux

package chaos

import "syscall"

// sysProcAttr: only Linux can tie a child's life to its parent's; the
// harness kills every process it started when it closes.
func sysProcAttr() *syscall.SysProcAttr { return nil }
