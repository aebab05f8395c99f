package check

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// root is the repository root, relative to this package.
const root = "../.."

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binDir    string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// aerieBinary builds aerie once, the way the Dockerfile's build stage
// does (buildArgs), and returns its path.
func aerieBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "aerie-deploy-check-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "aerie")
		args := append([]string{"build"}, buildArgs...)
		args = append(args, "-o", binPath, "./cmd/aerie")
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go %v: %w\n%s", args, err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// buildArgs are the go build flags of the Dockerfile's build stage
// (without the version); TestDockerfile checks that the Dockerfile
// passes them, and with CGO_ENABLED=0.
var buildArgs = []string{"-trimpath", "-ldflags", "-s -w"}

// TestStaticBinary builds aerie as the image does and checks that it
// runs without a libc: no ELF interpreter and no shared libraries, as a
// distroless/static or scratch image requires.
func TestStaticBinary(t *testing.T) {
	f, err := elf.Open(aerieBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("aerie has an ELF interpreter (PT_INTERP): it is dynamically linked and will not start on a distroless/static or scratch image")
		}
		if p.Type == elf.PT_DYNAMIC {
			t.Errorf("aerie has a dynamic section: build it with CGO_ENABLED=0")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) > 0 {
		t.Errorf("aerie needs shared libraries %v", libs)
	}
	out, err := exec.Command(binPath, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("aerie version: %v\n%s", err, out)
	}
}
