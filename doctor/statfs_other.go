//go:build !(linux || darwin || freebsd)

package doctor

import "errors"

// freeBytes is not implemented on this system; the disk space check is
// skipped.
func freeBytes(string) (uint64, error) { return 0, errors.ErrUnsupported }
