package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/aerie-dev/aerie/auth"
)

func cmdAuth(ctx context.Context, args []string) error {
	fs, _ := newFlags("auth init", "--out DIR [--routes HOST:PORT,...]")
	out := fs.String("out", "", "directory for the role seeds, users.conf, route.secret and routes.conf (created 0700; existing seeds and secret are kept)")
	routes := fs.String("routes", "", "comma-separated host:port (or nats-route://host:port) of every cluster node, for routes.conf's routes list with the route credentials in each URL (empty: routes.conf holds only the route authorization)")
	if len(args) == 0 || args[0] != "init" {
		if len(args) > 0 && isHelpFlag(args[0]) {
			fmt.Fprint(fs.Output(), "aerie auth has one subcommand, init: it writes one nkey seed per role, the nats-server users.conf that grants each role its permissions, and the cluster's route secret.\n\n")
			fs.Usage()
			return flag.ErrHelp
		}
		got := "nothing"
		if len(args) > 0 {
			got = fmt.Sprintf("%q", args[0])
		}
		return fmt.Errorf("want `aerie auth init --out DIR`, got %s after auth (see `aerie auth -h`)", got)
	}
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
	var list []string
	for _, r := range strings.Split(*routes, ",") {
		if r = strings.TrimSpace(r); r != "" {
			list = append(list, r)
		}
	}
	routesConf, err := auth.WriteRoutesConf(*out, list)
	if err != nil {
		return fmt.Errorf("--routes: %w", err)
	}
	for _, r := range auth.Roles {
		fmt.Printf("%-10s %s  %s\n", r, public[r], filepath.Join(*out, auth.SeedFile(r)))
	}
	fmt.Printf("users block: %s (include it from nats-server.conf; give each host only its role's seed)\n", conf)
	fmt.Printf("route secret: %s (copy it to every node)\n", filepath.Join(*out, auth.RouteSecretFile))
	fmt.Printf("cluster block: %s (secret; include it inside cluster { } on every node)\n", routesConf)
	if len(list) == 0 {
		fmt.Println("no --routes: routes.conf holds the route authorization only; give --routes to have the routes written with their credentials")
	}
	_ = os.Stdout.Sync()
	return nil
}

// isHelpFlag reports whether arg asks for help.
func isHelpFlag(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}
