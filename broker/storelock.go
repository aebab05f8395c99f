package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// LockFileName is the file, inside a server's StoreDir, that the server
// holds an exclusive lock on for as long as it runs. Two servers writing
// one JetStream store corrupt it, and nats-server does not prevent that
// itself. The file holds the holder's pid, host, address and start time
// as JSON, so that a server refused the store can say who has it. It is
// never removed: removing a lock file races with a server that has just
// opened it.
const LockFileName = "aerie-server.lock"

// StoreInUseError is what Start returns when another server, in this
// process or another on the same host, holds the store. Its fields come
// from the lock file and are zero when the holder has not written them yet.
type StoreInUseError struct {
	// Store is the store directory, as given in Config.StoreDir.
	Store string
	// PID, Host and Addr identify the server holding the store; Since is
	// when it took the store.
	PID   int
	Host  string
	Addr  string
	Since time.Time
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

// errLocked is what tryLock returns when another open file holds the lock.
var errLocked = errors.New("locked by another open file")

// lockRecord is the content of the lock file.
type lockRecord struct {
	PID   int       `json:"pid"`
	Host  string    `json:"host"`
	Addr  string    `json:"addr"`
	Since time.Time `json:"since"`
}

// storeLock is an exclusive lock on a store directory, held through an
// open lock file. The operating system releases it when the file is
// closed or the process dies, so a crashed server never leaves it behind.
type storeLock struct {
	f     *os.File
	since time.Time
}

// lockStore takes the lock on dir, creating dir if needed, and records
// this process in the lock file with addr as its address until record is
// called with the address it really listens on.
func lockStore(dir, addr string) (*storeLock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("broker: create store directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, LockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("broker: open lock file %s: %w", path, err)
	}
	if err := tryLock(f); err != nil {
		defer f.Close()
		if errors.Is(err, errLocked) {
			return nil, inUse(dir, f)
		}
		return nil, fmt.Errorf("broker: lock %s: %w", path, err)
	}
	l := &storeLock{f: f, since: time.Now()}
	if err := l.record(addr); err != nil {
		l.release()
		return nil, err
	}
	return l, nil
}

// inUse reads the holder from the lock file f, locked by someone else.
func inUse(dir string, f *os.File) error {
	e := &StoreInUseError{Store: dir}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return e
	}
	var r lockRecord
	if json.Unmarshal(b, &r) == nil {
		e.PID, e.Host, e.Addr, e.Since = r.PID, r.Host, r.Addr, r.Since
	}
	return e
}

// record writes this process and addr into the lock file.
func (l *storeLock) record(addr string) error {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown host"
	}
	b, err := json.Marshal(lockRecord{PID: os.Getpid(), Host: host, Addr: addr, Since: l.since})
	if err != nil {
		return fmt.Errorf("broker: encode lock record: %w", err)
	}
	b = append(b, '\n')
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("broker: write lock file %s: %w", l.f.Name(), err)
	}
	if _, err := l.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("broker: write lock file %s: %w", l.f.Name(), err)
	}
	return nil
}

// release gives the lock up. The file stays, emptied: its content only
// means something while it is locked.
func (l *storeLock) release() {
	_ = l.f.Truncate(0)
	_ = l.f.Close()
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
