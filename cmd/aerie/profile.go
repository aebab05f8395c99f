package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
)

// startCPUProfile writes a CPU profile of the command to path until the
// returned function is called, as AERIE_CPU_PROFILE asks: for finding
// where a role spends its CPU per prompt (go tool pprof -top aerie FILE).
// "%p" in path is replaced by the process id, so that several processes
// given the same setting do not write one file. At the end a profile of
// the allocations goes beside it, PATH.allocs (go tool pprof
// -sample_index=alloc_space): garbage is much of a role's CPU. An empty
// path profiles nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	path = strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid()))
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("AERIE_CPU_PROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("AERIE_CPU_PROFILE %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		if a, err := os.Create(path + ".allocs"); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(a, 0)
			a.Close()
		}
	}, nil
}
