//go:build !unix

package simulator

import "os"

// lockExclusive creates path; without flock there is no lock to hold,
// and a reader finds the file once it exists.
func lockExclusive(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
}
