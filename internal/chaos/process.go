package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// process is one aerie process, its output going to a log file of its
// own in the work directory.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	started time.Time

	done    chan struct{} // closed when the process has exited
	err     error         // Wait's result, once done is closed
	stopped atomic.Bool   // the harness ended it on purpose
}

// startProcess runs bin with args, its stdout and stderr appended to
// <logs>/<name>.log.
func startProcess(bin, logs, name string, args ...string) (*process, error) {
	path := filepath.Join(logs, name+".log")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "AERIE_LOG_FORMAT=text")
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: path, started: time.Now(), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// unexpectedExit reports whether the process ended without the harness
// asking it to, and how.
func (p *process) unexpectedExit() (bool, string) {
	if !p.exited() || p.stopped.Load() {
		return false, ""
	}
	return true, p.exitStatus()
}

// kill ends the process with SIGKILL and waits until it is gone.
func (p *process) kill() {
	p.stopped.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// terminate sends SIGTERM and waits up to grace, then kills.
func (p *process) terminate(grace time.Duration) {
	p.stopped.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.kill()
	}
}

// wait waits for the process to exit on its own, up to timeout.
func (p *process) wait(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err
	case <-t.C:
		return fmt.Errorf("%s (pid %d) still running after %v", p.name, p.pid(), timeout)
	}
}

// tail returns the last n lines of the process's log.
func (p *process) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// exitStatus describes how a finished process ended.
func (p *process) exitStatus() string {
	if p.err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return strings.TrimSpace(ee.String())
	}
	return p.err.Error()
}
