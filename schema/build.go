package schema

import (
	"runtime/debug"
	"sync"
)

// buildVersion is the aerie version of this binary, set at build time
// with -ldflags "-X github.com/aerie-dev/aerie/schema.buildVersion=...":
// the Makefile and the Dockerfile give `git describe`. Empty means the
// build did not say; BuildVersion then falls back on the commit.
var buildVersion string

// BuildVersion is this binary's aerie version, as manifests (WrittenBy),
// heartbeats and `aerie version` give it: the one set at build time, or
// "dev+<commit>" from the Go toolchain's VCS stamp, or "dev".
func BuildVersion() string { return versionOnce() }

var versionOnce = sync.OnceValue(func() string {
	if buildVersion != "" {
		return buildVersion
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	v, dirty := "dev", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			if len(s.Value) > 12 {
				s.Value = s.Value[:12]
			}
			v = "dev+" + s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && v != "dev" {
		v += "-dirty"
	}
	return v
})
