"""The CronJob controller: `controller` starts and prunes a CronJob's Jobs; `schedule` parses and
evaluates cron schedules in a time zone."""

from controller_manager.controllers.cronjob.controller import NAME, add_flags, new

__all__ = ["NAME", "add_flags", "new"]
