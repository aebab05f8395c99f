package broker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/aerie-dev/aerie/fsmode"
	"github.com/aerie-dev/aerie/lockfile"
)

// LockFileName is the file, inside a server's StoreDir, that the server
// holds an exclusive lock on for as long as it runs. Two servers writing
// one JetStream store corrupt it, and nats-server does not prevent that
// itself. The file says who holds it (pid, host, address, since when), so
// that a server refused the store can say who has it.
const LockFileName = "aerie-server.lock"

// StoreInUseError is what Start returns when another server, in this
// process or another on the same host, holds the store. The holder's
// fields are zero when it has not written them yet.
type StoreInUseError struct {
	// Store is the store directory, as given in Config.StoreDir.
	Store string
	lockfile.Holder
}

func (e *StoreInUseError) Error() string {
	holder := "another server (it has not yet written who it is)"
	if e.PID != 0 {
		holder = fmt.Sprintf("another server: pid %d on %s, listening on %s, since %s",
			e.PID, e.Host, e.Addr, e.Since.Local().Format(time.RFC3339))
	}
	return fmt.Sprintf("the JetStream store %s is in use by %s; two servers on one store corrupt it: "+
		"stop that server, or give this one another store (--store for `aerie server`, --data-dir for `aerie run`)",
		e.Store, holder)
}

// lockStore takes the lock on dir, creating dir if needed (its mode left
// to the umask, as for everything aerie creates), and records
// addr as this server's address until it knows the one it listens on.
func lockStore(dir, addr string) (*lockfile.Lock, error) {
	if err := os.MkdirAll(dir, fsmode.Dir); err != nil {
		return nil, fmt.Errorf("broker: create store directory %s: %w", dir, err)
	}
	l, err := lockfile.Acquire(filepath.Join(dir, LockFileName), "aerie NATS server")
	var held *lockfile.HeldError
	if errors.As(err, &held) {
		return nil, &StoreInUseError{Store: dir, Holder: held.Holder}
	}
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	if err := l.SetAddr(addr); err != nil {
		l.Release()
		return nil, fmt.Errorf("broker: %w", err)
	}
	return l, nil
}

// hostPort joins a configured host and port for the lock record before
// the server has bound its port; 0 is shown as "random".
func hostPort(host string, port int) string {
	p := strconv.Itoa(port)
	if port == 0 {
		p = "random port"
	}
	return net.JoinHostPort(host, p)
}
