//go:build linux

package main_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"
)

// runOnTerminal runs cmd with a pseudo-terminal as its stdin and stdout
// (stderr goes to the same output), for programs that refuse to run
// without one, and returns everything it wrote. ctx bounds the run.
func runOnTerminal(ctx context.Context, cmd *exec.Cmd) ([]byte, error) {
	out, err := runOnTerminalAnswering(ctx, cmd, "", "")
	return []byte(out), err
}

// runOnTerminalAnswering is runOnTerminal that types answer whenever the
// program shows prompt ("" answers nothing).
func runOnTerminalAnswering(ctx context.Context, cmd *exec.Cmd, prompt, answer string) (string, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return "", fmt.Errorf("open /dev/ptmx: %w", err)
	}
	defer master.Close()
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		return "", fmt.Errorf("unlock pty: %w", err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		return "", fmt.Errorf("pty number: %w", err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return "", fmt.Errorf("open pty: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	if err := cmd.Start(); err != nil {
		tty.Close()
		return "", err
	}
	tty.Close() // the child holds it; reads end (EIO) when the child is gone
	var out bytes.Buffer
	copied := make(chan struct{})
	var sink io.Writer = &out
	if prompt != "" {
		a := &pageAnswerer{prompt: []byte(prompt), answer: []byte(answer), tty: master, asked: make(chan struct{})}
		sink = io.MultiWriter(&out, a)
		go a.typeAnswers(copied)
	}
	go func() {
		_, _ = io.Copy(sink, master)
		close(copied)
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err = <-waited:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-waited
		err = ctx.Err()
	}
	// Once the child and everything it started are gone the reads end on
	// their own, after what is left in the terminal's buffer.
	select {
	case <-copied:
	case <-time.After(10 * time.Second):
	}
	master.Close()
	<-copied
	// The terminal turns every \n into \r\n.
	return string(bytes.ReplaceAll(out.Bytes(), []byte("\r\n"), []byte("\n"))), err
}
