//go:build unix

package fsmode

import "syscall"

func setUmask(mask int) int { return syscall.Umask(mask) }
