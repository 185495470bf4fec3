package main

import (
	"log/slog"
	"os"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
	"github.com/cellgate/cellgate/internal/runtime"
)

// mountConsole adds the operator console (/admin/ and /admin/api/) when the
// admin token is set; without it those paths answer 404. The console sees
// the PostgreSQL runtime's databases through console.Database, so the
// runtime package never links the job backend.
func mountConsole(cfg config.Config, srv *runtime.Server, jobsRT jobRuntime, rejections *console.TopK, log *slog.Logger) error {
	admin := os.Getenv(cfg.Server.AdminTokenEnv)
	if cfg.Server.AdminTokenEnv == "" || admin == "" {
		return nil
	}
	operator := ""
	if cfg.Server.OperatorTokenEnv != "" {
		operator = os.Getenv(cfg.Server.OperatorTokenEnv)
	}
	var dbs []console.Database
	if rt, ok := jobsRT.(*pgjobs.Runtime); ok {
		for _, b := range rt.Databases() {
			dbs = append(dbs, b)
		}
	}
	c, err := console.New(console.Config{
		AdminToken:    admin,
		OperatorToken: operator,
		Databases:     dbs,
		Spec:          cfg,
		Admission:     func() any { return srv.Bulkheads().Report() },
		Rejections:    rejections,
		Logger:        log,
	})
	if err != nil {
		return err
	}
	c.Register(srv.Echo())
	return nil
}
