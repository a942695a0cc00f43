"""The public surface of guard.stores: one sorted, complete ``__all__``."""

from __future__ import annotations

import subprocess
import sys
import types

import guard.stores


class TestAll:
    def test_all_is_sorted(self) -> None:
        """__all__ is kept in sorted order so additions are easy to review."""
        assert guard.stores.__all__ == sorted(guard.stores.__all__)

    def test_all_lists_every_public_name(self) -> None:
        """Every public, non-module name the package holds is exported, and nothing else."""
        public = {
            name
            for name, value in vars(guard.stores).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)
        }
        assert set(guard.stores.__all__) == public

    def test_every_implementation_is_exported(self) -> None:
        """Each backend's classes are reachable from the package."""
        for module in (guard.stores.memory, guard.stores.sqlite):
            for name in module.__all__:
                if name[0].isupper() and "DDL" not in name:
                    assert name in guard.stores.__all__


class TestRedisModule:
    def test_redis_all_is_sorted(self) -> None:
        """guard.stores.redis keeps its own sorted __all__."""
        import guard.stores.redis

        assert guard.stores.redis.__all__ == sorted(guard.stores.redis.__all__)

    def test_redis_backend_is_not_re_exported(self) -> None:
        """The Redis backend is its own module, so guard.stores needs no redis package."""
        import guard.stores.redis

        assert not set(guard.stores.redis.__all__) & set(guard.stores.__all__)

    def test_importing_guard_does_not_import_redis(self) -> None:
        """A fresh interpreter imports guard and guard.stores without loading redis."""
        code = "import sys, guard, guard.stores; assert 'redis' not in sys.modules, 'redis loaded'"
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
