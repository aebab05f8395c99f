package auth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// SeedFile is the name of role r's nkey seed file in an auth directory.
func SeedFile(r Role) string { return string(r) + ".nk" }

// UsersFile is the name of the nats-server users block EnsureDir can write.
const UsersFile = "users.conf"

// EnsureDir makes dir (mode 0700) hold one nkey seed per role (mode
// 0600), creating the seeds that are missing and reusing, never
// overwriting, those already there. It returns each role's public nkey.
func EnsureDir(dir string) (map[Role]string, error) {
	if dir == "" {
		return nil, errors.New("auth: no directory for the role seeds given")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("auth: create %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("auth: make %s private (0700): %w", dir, err)
	}
	public := make(map[Role]string, len(Roles))
	for _, r := range Roles {
		path := filepath.Join(dir, SeedFile(r))
		kp, err := LoadSeed(path)
		if errors.Is(err, fs.ErrNotExist) {
			kp, err = createSeed(path)
		}
		if err != nil {
			return nil, err
		}
		pk, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("auth: public key of %s: %w", path, err)
		}
		public[r] = pk
	}
	return public, nil
}

func createSeed(path string) (nkeys.KeyPair, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("auth: create nkey for %s: %w", path, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("auth: seed for %s: %w", path, err)
	}
	created, err := createOnce(path, append(seed, '\n'))
	if err != nil {
		return nil, err
	}
	if !created {
		// Another process (a second node started on the same directory)
		// made it meanwhile: use that one, as every node must.
		return LoadSeed(path)
	}
	return kp, nil
}

// createOnce creates path, mode 0600, holding content, unless path exists
// (created false, nothing written). The file appears whole or not at all:
// it is written to a temporary file and linked into place, so a process
// starting beside this one on the same directory never reads a seed or a
// secret half written, and never replaces one another process made.
func createOnce(path string, content []byte) (created bool, err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return false, fmt.Errorf("auth: write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return false, fmt.Errorf("auth: write %s: %w", path, err)
	}
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		return false, fmt.Errorf("auth: write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return false, fmt.Errorf("auth: write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("auth: write %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, fmt.Errorf("auth: write %s: %w", path, err)
	}
	return true, nil
}

// LoadSeed reads a user nkey seed file (as written by EnsureDir or `nk
// -gen user`). A missing file yields an error wrapping fs.ErrNotExist.
func LoadSeed(path string) (nkeys.KeyPair, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: read nkey seed: %w", err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return nil, fmt.Errorf("auth: %s is not an nkey seed (want a line starting SU): %w", path, err)
	}
	return kp, nil
}

// NkeyUsers returns the embedded server's users: each role's public nkey
// with its permissions.
func NkeyUsers(public map[Role]string) ([]*server.NkeyUser, error) {
	users := make([]*server.NkeyUser, 0, len(Roles))
	for _, r := range Roles {
		pk, ok := public[r]
		if !ok {
			return nil, fmt.Errorf("auth: no public nkey for role %s", r)
		}
		p, err := Permissions(r)
		if err != nil {
			return nil, err
		}
		users = append(users, &server.NkeyUser{Nkey: pk, Permissions: p})
	}
	return users, nil
}

// WriteUsersConf writes dir/users.conf (mode 0600) for the public keys
// given, replacing an older one: it holds no secret, only public keys and
// permissions, and must follow the seeds.
func WriteUsersConf(dir string, public map[Role]string) (string, error) {
	conf, err := UsersConf(public)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, UsersFile)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return "", fmt.Errorf("auth: write %s: %w", path, err)
	}
	return path, nil
}
