package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aerie-dev/aerie/bytesize"
)

// A disk that fills during a hidden-states run would make the server
// write files it cannot finish, and every attempt fail: the samples would
// run out of attempts for want of a disk, not for any fault of theirs.
// So before a sample is sent, the worker makes sure the disks its file
// goes to (the run's output directory, and the server's once a reply has
// named it) have room for it and diskReserve more; while they have not,
// it holds the sample (its delivery stays in progress, no attempt is
// spent), pulls nothing, says so in its log, its heartbeats (status) and
// aerie_worker_disk_full, and goes on by itself once there is room. The
// room kept free beyond the file is Config.DiskReserve.

// diskPoll is how often a full disk is looked at again.
const diskPoll = 2 * time.Second

// diskFullLogEvery is how often a worker waiting for room says so again.
const diskFullLogEvery = 30 * time.Second

// diskRoom is the worker's view of the room on its hidden-states disks.
// The zero value is not usable: New makes it.
type diskRoom struct {
	free func(dir string) (int64, error)
	// reserve is kept free beyond a sample's file (Config.DiskReserve).
	reserve int64
	log     *slog.Logger
	onRoom  func()

	mu     sync.Mutex
	full   string // why there is no room; "" while there is
	since  time.Time
	logged time.Time
}

// wait returns once every one of dirs has room for need bytes and the
// reserve, looking again every diskPoll, or with ctx's error when ctx
// ends first. A directory whose room cannot be read does not hold the
// sample: its writes will say what is wrong.
func (r *diskRoom) wait(ctx context.Context, l *lane, dirs []string, need int64) error {
	for {
		short := ""
		for _, dir := range dirs {
			free, err := r.free(dir)
			if err == nil && free < need+r.reserve {
				short = fmt.Sprintf("disk full: %s has %s free, and a sample of run %s needs %s (and %s kept free): free space there, or produce the run with --out on a larger disk; the worker resumes by itself",
					dir, bytesize.Format(free), l.run, bytesize.Format(need), bytesize.Format(r.reserve))
				break
			}
		}
		if short == "" {
			r.roomAgain()
			return nil
		}
		r.fullNow(short)
		t := time.NewTimer(diskPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// fullNow records that a disk has no room, as why says, logging it when
// it has just filled and then every diskFullLogEvery.
func (r *diskRoom) fullNow(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	switch {
	case r.full == "":
		r.since, r.logged = now, now
		r.log.Error("pausing: "+why, "pause", "disk full")
	case now.Sub(r.logged) >= diskFullLogEvery:
		r.logged = now
		r.log.Warn("still waiting for room on disk: "+why, "for", now.Sub(r.since).Round(time.Second))
	}
	r.full = why
}

// roomAgain records that the disks have room.
func (r *diskRoom) roomAgain() {
	r.mu.Lock()
	was := r.full
	r.full = ""
	since := r.since
	r.mu.Unlock()
	if was == "" {
		return
	}
	r.log.Info("the disk has room again: resuming", "paused", time.Since(since).Round(time.Millisecond))
	if r.onRoom != nil {
		r.onRoom()
	}
}

// reason is why the disks have no room, "" while they have.
func (r *diskRoom) reason() string {
	if r == nil {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.full
}
