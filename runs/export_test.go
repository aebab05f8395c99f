package runs

import "time"

// SetHeartbeatWindow changes how recent a heartbeat must be to make a run
// look alive, for a test, and returns a function that restores it.
func SetHeartbeatWindow(d time.Duration) (restore func()) {
	old := heartbeatWindow
	heartbeatWindow = d
	return func() { heartbeatWindow = old }
}
