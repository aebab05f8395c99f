package provision

import "time"

// SetManifestWarnInterval shortens WaitManifest's warning interval for a
// test and returns a function that restores it.
func SetManifestWarnInterval(d time.Duration) (restore func()) {
	old := manifestWarnInterval
	manifestWarnInterval = d
	return func() { manifestWarnInterval = old }
}
