package chaos

import "syscall"

// sysProcAttr makes the kernel kill a child with SIGKILL when the harness
// dies, so that a test binary killed by its timeout leaves no process
// behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
