//go:build !(linux || darwin || freebsd)

package aggregator

import "errors"

// diskSpace is not implemented on this system: the data directory's
// metrics are left out.
func diskSpace(string) (free, size uint64, err error) { return 0, 0, errors.ErrUnsupported }
