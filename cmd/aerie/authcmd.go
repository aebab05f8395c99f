package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aerie-dev/aerie/auth"
)

func cmdAuth(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "init" {
		return errors.New("aerie auth: want `aerie auth init --out DIR`")
	}
	fs, _ := newFlags("auth init", "--out DIR")
	out := fs.String("out", "", "directory for the role seeds and users.conf (created 0700; existing seeds are kept)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("aerie auth init: --out DIR is required")
	}
	public, err := auth.EnsureDir(*out)
	if err != nil {
		return err
	}
	conf, err := auth.WriteUsersConf(*out, public)
	if err != nil {
		return err
	}
	for _, r := range auth.Roles {
		fmt.Printf("%-10s %s  %s\n", r, public[r], filepath.Join(*out, auth.SeedFile(r)))
	}
	fmt.Printf("users block: %s (include it from nats-server.conf; give each host only its role's seed)\n", conf)
	_ = os.Stdout.Sync()
	return nil
}
