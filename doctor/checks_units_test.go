package doctor_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/aerie-dev/aerie/doctor"
)

func TestUnitWithRelativeExecStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	units := writeUnit(t, dir, "aerie-work@.service",
		"# ExecStart=commented out, not checked",
		"ExecStart=aerie work --run %i --window 200")
	rep := run(t, doctor.Config{Units: units})
	expect(t, rep, "units", doctor.Fail,
		"aerie-work@.service:6: ExecStart=aerie work --run %i --window 200 uses PATH lookup",
		"fix:in aerie-work@.service:6 write /")
}

func TestUnitWithMissingOrNonExecutableProgram(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing", "aerie")
	units := writeUnit(t, dir, "a.service",
		"ExecStartPre=-"+plain+" --check",
		"ExecStart="+missing+` \`,
		"    aggregate --run %i")
	writeUnit(t, dir, "b.service", "ExecStart="+missing+" work")
	rep := run(t, doctor.Config{Units: units})
	expect(t, rep, "units", doctor.Fail,
		plain+" is not executable (mode -rw-r--r--) (a.service:5 ExecStartPre)",
		missing+" does not exist (a.service:6 ExecStart, b.service:5 ExecStart)",
		"fix:chmod 0755 "+plain,
		"fix:install "+missing)
}

func TestUnitsHealthy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exe := executableFile(t, dir)
	units := writeUnit(t, dir, "aerie-aggregate@.service",
		"ExecStart="+exe+" aggregate --run %i",
		"ExecReload=/bin/kill -s HUP $MAINPID",
		"ExecStop=",
		"ExecStopPost=%h/bin/cleanup")
	rep := run(t, doctor.Config{Units: filepath.Join(units, "aerie-aggregate@.service")})
	expect(t, rep, "units", doctor.Pass,
		"1 unit file, 3 commands; every program named exists and is executable: "+exe+", /bin/kill",
		"not checked (specifier or variable in the path): aerie-aggregate@.service:8: %h/bin/cleanup")
}

func TestUnitsDirectoryWithoutServices(t *testing.T) {
	t.Parallel()
	rep := run(t, doctor.Config{Units: t.TempDir()})
	expect(t, rep, "units", doctor.Warn, "no *.service files")
}
