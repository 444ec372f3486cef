"""The mutant catalogue: realistic bugs a backend author could make, planted one at a time by
:mod:`contract_tests.mutation` to measure how many the contract catches.

A mutant is an exact text replacement in one module of ``storage_adapter`` (it must match exactly once:
a refactoring that moves the text makes the catalogue fail its own test rather than silently test
nothing). ``targets`` are the embedded targets where the mutated code runs. A mutant no behaviour can
reveal is kept, with ``equivalent`` saying why, and never run. ``smoke`` marks the CI-sized subset: one
or two per bug class.
"""

from __future__ import annotations

from dataclasses import dataclass

ALL = ("memory", "local", "seaweedfs")
LOCAL = ("local",)
OBSTORE = ("memory", "seaweedfs")


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    find: str
    replace: str
    bug: str
    targets: tuple[str, ...] = ALL
    equivalent: str = ""
    smoke: bool = False


_ADAPTER = "storage_adapter/adapter.py"
_DERIVED = "storage_adapter/derived.py"
_KEYS = "storage_adapter/keys.py"
_OBSTORE = "storage_adapter/obstore_backend.py"
_LOCAL = "storage_adapter/local_backend.py"
_MUTATION = "storage_adapter/local_mutation.py"

CATALOGUE: tuple[Mutant, ...] = (
    # -- adapter: the layer every backend shares --------------------------------------------------------
    Mutant(
        "adapter-create-reports-loss-as-win",
        _ADAPTER,
        "return self._backend.put_if_absent(key, body) is not None",
        "self._backend.put_if_absent(key, body)\n            return True",
        "write_if_absent answers True to every caller, winners and losers alike",
        smoke=True,
    ),
    Mutant(
        "adapter-exists-swallows-errors",
        _ADAPTER,
        "        except NotFoundError:\n            return False\n        return True",
        "        except Exception:\n            return False\n        return True",
        "exists() answers False on any error, an outage included",
    ),
    Mutant(
        "adapter-list-unsorted",
        _ADAPTER,
        "return sorted(infos, key=lambda i: i.key)",
        "return infos",
        "list() returns the backend's order instead of sorted keys",
    ),
    Mutant(
        "adapter-list-dir-prefixes-unsorted",
        _ADAPTER,
        "prefixes=tuple(sorted(prefixes))",
        "prefixes=tuple(prefixes)",
        "list_dir() returns child prefixes unsorted",
    ),
    Mutant(
        "adapter-rename-onto-itself-copies",
        _ADAPTER,
        "            if src == dst:",
        "            if src == dst and False:",
        "rename(k, k) goes through copy-then-delete (deletes the object on memory, changes the token)",
    ),
    Mutant(
        "adapter-rename-onto-itself-skips-check",
        _ADAPTER,
        "                self._backend.head_token(src)\n                return",
        "                return",
        "rename(k, k) of a missing key succeeds instead of NotFoundError",
    ),
    Mutant(
        "adapter-cas-accepts-empty-token",
        _ADAPTER,
        "if not isinstance(token, str) or not token:",
        "if not isinstance(token, str):",
        "write_if_match accepts an empty token instead of refusing it",
    ),
    # -- derived operations ---------------------------------------------------------------------------------
    Mutant(
        "derived-read-if-exists-swallows-errors",
        _DERIVED,
        "        except NotFoundError:\n            return None",
        "        except StorageError:\n            return None",
        "read_if_exists answers None (absent) on any error",
        smoke=True,
    ),
    Mutant(
        "derived-delete-prefix-bleeds",
        _DERIVED,
        "infos = self.list(prefix)",
        "infos = [i for i in self.list(prefix.rsplit('/', 1)[0] if '/' in prefix else '') "
        "if i.key.startswith(prefix)]",
        "delete_prefix('a') also deletes 'ab/x' (string prefix instead of whole segments)",
    ),
    Mutant(
        "derived-delete-prefix-empties-root",
        _DERIVED,
        "        if not validate_prefix(prefix, self.backend):",
        "        if not validate_prefix(prefix, self.backend) and False:",
        "delete_prefix('') empties the whole root instead of refusing",
    ),
    Mutant(
        "derived-delete-prefix-miscounts",
        _DERIVED,
        "        return len(infos)",
        "        return len(infos) - 1 if infos else 0",
        "delete_prefix reports one object fewer than it deleted",
    ),
    # -- keys ---------------------------------------------------------------------------------------------------
    Mutant(
        "keys-length-in-characters",
        _KEYS,
        'size = len(key.encode("utf-8"))',
        "size = len(key)",
        "the key length is counted in characters, not UTF-8 bytes",
        smoke=True,
    ),
    Mutant(
        "keys-length-off-by-one",
        _KEYS,
        "if size > MAX_KEY_BYTES else",
        "if size >= MAX_KEY_BYTES else",
        "a key of exactly 1,024 bytes is refused",
    ),
    Mutant(
        "keys-fast-path-length-off-by-one",
        _KEYS,
        "len(key) <= MAX_KEY_BYTES and",
        "len(key) <= MAX_KEY_BYTES + 1 and",
        "an ASCII key of 1,025 bytes passes the fast path",
    ),
    Mutant(
        "keys-staging-rule-last-segment-only",
        _KEYS,
        "(?!.*#\\d+(?:/|$))",
        "(?!.*#\\d+$)",
        "the reserved '#<digits>' rule is checked on the last segment only (ASCII fast path)",
    ),
    Mutant(
        "keys-segment-limit-in-characters",
        _KEYS,
        'if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:',
        "if len(segment) > MAX_SEGMENT_BYTES:",
        "a segment's limit is counted in characters (a 200-character segment of 400 bytes passes)",
    ),
    Mutant(
        "keys-no-dot-segment-check",
        _KEYS,
        '        if segment in (".", ".."):',
        '        if segment == "..":',
        "a '.' segment is accepted",
    ),
    Mutant(
        "keys-backslash-allowed",
        _KEYS,
        '    if "\\\\" in key:\n        raise _reject(key, "backslash", backend)\n',
        "",
        "a backslash is accepted in a key (it is a separator on some stores)",
    ),
    Mutant(
        "keys-surrogates-accepted",
        _KEYS,
        '        size = len(key.encode("utf-8"))\n    except UnicodeEncodeError as exc:',
        '        size = len(key.encode("utf-8", "surrogatepass"))\n    except UnicodeEncodeError as exc:',
        "a key with a lone surrogate is accepted (unlistable on local, unstorable on S3)",
    ),
    Mutant(
        "keys-prefix-keeps-double-slash",
        _KEYS,
        '    if isinstance(prefix, str) and prefix.endswith("/"):\n        prefix = prefix[:-1]',
        '    if isinstance(prefix, str) and prefix.endswith("/"):\n        prefix = prefix.rstrip("/")',
        "a prefix 'a//' is accepted as 'a' instead of refused",
    ),
    # -- obstore driver (memory and S3) -------------------------------------------------------------------------
    Mutant(
        "obstore-cas-error-is-conflict",
        _OBSTORE,
        "            except (PreconditionError, FileNotFoundError):\n                return None",
        "            except (PreconditionError, FileNotFoundError, BaseError):\n                return None",
        "CAS answers None (lost race) on every error, an outage included",
        targets=OBSTORE,
        smoke=True,
    ),
    Mutant(
        "obstore-create-error-is-loss",
        _OBSTORE,
        "            except AlreadyExistsError:\n                return None",
        "            except (AlreadyExistsError, BaseError):\n                return None",
        "write_if_absent answers False (lost) on every error",
        targets=OBSTORE,
    ),
    Mutant(
        "obstore-delete-swallows-errors",
        _OBSTORE,
        'with self.translated(key, "delete"), suppress(FileNotFoundError):',
        'with self.translated(key, "delete"), suppress(BaseError):',
        "delete swallows every error, not just 'already absent'",
        targets=OBSTORE,
        smoke=True,
    ),
    Mutant(
        "obstore-cas-unconditional",
        _OBSTORE,
        'mode: Any = {"e_tag": token}',
        'mode: Any = "overwrite"',
        "CAS writes unconditionally (the If-Match is dropped)",
        targets=OBSTORE,
        smoke=True,
    ),
    Mutant(
        "obstore-create-overwrites",
        _OBSTORE,
        'data, mode="create")["e_tag"]',
        'data)["e_tag"]',
        "write_if_absent writes unconditionally (the If-None-Match is dropped)",
        targets=OBSTORE,
    ),
    Mutant(
        "obstore-rename-keeps-source",
        _OBSTORE,
        "            obstore.copy(self._store, self.path(src), self.path(dst))\n            self._delete_path(self.path(src))",
        "            obstore.copy(self._store, self.path(src), self.path(dst))",
        "rename copies without deleting the source",
        targets=OBSTORE,
    ),
    Mutant(
        "obstore-rename-deletes-first",
        _OBSTORE,
        "            obstore.copy(self._store, self.path(src), self.path(dst))\n            self._delete_path(self.path(src))",
        "            data = obstore.get(self._store, self.path(src)).bytes()\n"
        "            self._delete_path(self.path(src))\n"
        "            obstore.put(self._store, self.path(dst), bytes(data))",
        "rename deletes the source before the copy lands (a crash or failure loses the object)",
        targets=OBSTORE,
        equivalent="only a crash between delete and put shows it; no clause crashes "
        "mid-rename on S3 or memory (the recovery-sidecar protocol never relies on rename)",
    ),
    Mutant(
        "obstore-list-dir-no-confirm",
        _OBSTORE,
        "        if self._confirm_prefixes:\n            prefixes = [p for p in prefixes if self._has_objects(prefix, p)]\n",
        "",
        "list_dir reports emptied directories as prefixes (SeaweedFS keeps them)",
        targets=("seaweedfs",),
    ),
    Mutant(
        "obstore-status-503-permanent",
        _OBSTORE,
        "    if status in (408, 409, 429) or status >= 500:",
        "    if status in (408, 409, 429):",
        "a 5xx answer is classified permanent, not transient (never retried by callers)",
        targets=OBSTORE,
    ),
    Mutant(
        "obstore-denied-is-not-found",
        _OBSTORE,
        "        if isinstance(exc, FileNotFoundError) or status == 404:",
        "        if isinstance(exc, FileNotFoundError) or status in (403, 404):",
        "403 Forbidden is reported as NotFoundError (a denied read looks like an absent object)",
        targets=OBSTORE,
    ),
    Mutant(
        "obstore-panic-escapes",
        _OBSTORE,
        "        if isinstance(exc, _TRANSLATED) or _is_panic(exc):",
        "        if isinstance(exc, _TRANSLATED):",
        "a Rust panic escapes untranslated",
        targets=ALL,
    ),
    Mutant(
        "obstore-read-token-from-head",
        _OBSTORE,
        '            result = obstore.get(self._store, self.path(key))\n            return _whole_body(result), str(result.meta["e_tag"])',
        "            result = obstore.get(self._store, self.path(key))\n            body = _whole_body(result)\n"
        '            return body, str(obstore.head(self._store, self.path(key))["e_tag"])',
        "read_versioned takes the token from a second request (bytes and token may belong to different "
        "versions)",
        targets=OBSTORE,
    ),
    # -- declared capabilities (checked by the contract, not believed) -----------------------------------------
    Mutant(
        "caps-local-not-shared",
        "storage_adapter/builtin_backends.py",
        "atomic_rename=True,\n            shared_across_processes=True,\n            equal_content_equal_token=False,\n            durable=True,",
        "atomic_rename=True,\n            shared_across_processes=False,\n            equal_content_equal_token=False,\n            durable=True,",
        "local declares its store per-process: every process race is skipped, unseen",
        targets=LOCAL,
        smoke=True,
    ),
    Mutant(
        "caps-memory-shared",
        "storage_adapter/builtin_backends.py",
        "            shared_across_processes=False,\n            equal_content_equal_token=False,\n            durable=False,",
        "            shared_across_processes=True,\n            equal_content_equal_token=False,\n            durable=False,",
        "memory claims its store is shared across processes (it is per process)",
        targets=("memory",),
    ),
    Mutant(
        "caps-s3-tokens-differ",
        "storage_adapter/builtin_backends.py",
        '            shared_across_processes=True,\n            equal_content_equal_token=True,\n            durable=True,\n            token_semantics="the ETag;',
        '            shared_across_processes=True,\n            equal_content_equal_token=False,\n            durable=True,\n            token_semantics="the ETag;',
        "S3 declares that equal content gives distinct tokens (ETags are content hashes: an ABA trap)",
        targets=("seaweedfs",),
    ),
    # -- local driver ----------------------------------------------------------------------------------------
    Mutant(
        "local-list-shows-staging",
        _LOCAL,
        "        if not entry.is_file(follow_symlinks=False) or not _is_key(key):",
        "        if not entry.is_file(follow_symlinks=False):",
        "listings show staging files (and other invalid names) as objects",
        targets=LOCAL,
        smoke=True,
    ),
    Mutant(
        "local-list-dir-empty-prefixes",
        _LOCAL,
        "                    and self._holds_objects(chain.fd, entry.name, key)\n",
        "",
        "list_dir reports directories without objects as prefixes",
        targets=LOCAL,
    ),
    Mutant(
        "local-head-accepts-directory",
        _LOCAL,
        "            if st is None or not stat.S_ISREG(st.st_mode):",
        "            if st is None:",
        "exists() is True for a prefix (a directory)",
        targets=LOCAL,
    ),
    Mutant(
        "local-list-from-root",
        _LOCAL,
        "return open_chain(self._root, dir_names(self.path(prefix) if prefix else self._prefix), create=False)",
        'return open_chain(self._root, dir_names(self.path(prefix) if prefix else ""), create=False)',
        "list('') of a child adapter lists from the store root (objects outside its prefix)",
        targets=LOCAL,
    ),
    Mutant(
        "local-delete-swallows-errors",
        _LOCAL,
        '        with self.translated(key, "delete"):\n            self._mutator.delete(self.path(key))',
        '        with self.translated(key, "delete"):\n            try:\n                self._mutator.delete(self.path(key))\n'
        "            except OSError:\n                pass",
        "delete swallows every OS error (EIO, EACCES), not just 'already absent'",
        targets=LOCAL,
    ),
    Mutant(
        "local-cas-error-is-conflict",
        _LOCAL,
        "            return self._mutator.write_if_match(self.path(key), data, token)",
        "            try:\n                return self._mutator.write_if_match(self.path(key), data, token)\n"
        "            except OSError:\n                return None",
        "CAS answers None (lost race) on every OS error",
        targets=LOCAL,
    ),
    Mutant(
        "local-read-error-is-absent",
        _LOCAL,
        "                data, st = read_object(chain.fd, name, path)",
        "                try:\n                    data, st = read_object(chain.fd, name, path)\n"
        "                except OSError as exc:\n                    raise FileNotFoundError(path) from exc",
        "a failing read (EIO, EACCES) is reported as an absent object",
        targets=LOCAL,
    ),
    # -- local mutations -------------------------------------------------------------------------------------
    Mutant(
        "local-cas-no-lock",
        _MUTATION,
        "            with self._locked((directory, False)) as (chain,):\n                current = self._current(chain, name)",
        "            with open_chain(self.root, directory, True) as chain:\n                current = self._current(chain, name)",
        "CAS compares and replaces without the directory lock",
        targets=LOCAL,
        smoke=True,
    ),
    Mutant(
        "local-create-check-then-rename",
        _MUTATION,
        "                os.link(staging, name, src_dir_fd=chain.fd, dst_dir_fd=chain.fd, follow_symlinks=False)\n            except FileExistsError:",
        "                os.rename(staging, name, src_dir_fd=chain.fd, dst_dir_fd=chain.fd)\n            except FileExistsError:",
        "create publishes by rename (overwrites) instead of link (fails if present)",
        targets=LOCAL,
        equivalent="the directory lock already serializes creates; link only matters against writers "
        "that take no lock, which no adapter is",
    ),
    Mutant(
        "local-write-in-place",
        _MUTATION,
        "            staging, token = self._stage(chain, name, data, self._current(chain, name))\n            self._replace(chain, staging, name)\n            return token",
        "            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=chain.fd)\n"
        "            try:\n                view = memoryview(data)\n                while view:\n"
        "                    view = view[os.write(fd, view) :]\n                _date_after(fd, None)\n"
        "                return local_token(os.fstat(fd))\n            finally:\n                os.close(fd)",
        "write truncates and rewrites the file in place (readers see torn bodies)",
        targets=LOCAL,
        smoke=True,
    ),
    Mutant(
        "local-token-not-monotonic",
        _MUTATION,
        "        mtime_us = max(mtime_us, previous.st_mtime_ns // 1000 + 1)",
        "        mtime_us = mtime_us",
        "a new version may reuse the previous version's token (inode and coarse mtime reused: ABA)",
        targets=LOCAL,
        equivalent="the staged file's mtime is set to now at microsecond precision under the directory lock, and a publish (stage, write, utime, rename) takes longer than a microsecond, so two versions never share inode, mtime and size on a filesystem with fine timestamps; the +1 us guards coarse-timestamp filesystems the contract cannot choose",
    ),
    Mutant(
        "local-cas-ignores-token",
        _MUTATION,
        "                if current is None or local_token(current) != token:",
        "                if current is None:",
        "CAS replaces whatever the current token is",
        targets=LOCAL,
    ),
    Mutant(
        "local-cas-creates-absent",
        _MUTATION,
        "                if current is None or local_token(current) != token:\n                    return None",
        "                if current is not None and local_token(current) != token:\n                    return None",
        "CAS on an absent key creates it",
        targets=LOCAL,
    ),
    Mutant(
        "local-delete-no-lock",
        _MUTATION,
        '            with self._locked((directory, False)) as (chain,):\n                if self._current(chain, name) is None:\n                    return\n                fault_point("unlink")\n                os.unlink(name, dir_fd=chain.fd)\n                self._sync(chain.fd)\n        except _Absent:',
        "            os.unlink(os.path.join(self.root, path))\n        except FileNotFoundError:",
        "delete unlinks by path without the directory lock (races a CAS)",
        targets=LOCAL,
    ),
    Mutant(
        "local-shared-lock",
        _MUTATION,
        "                fcntl.flock(by_inode[inode], fcntl.LOCK_EX)",
        "                fcntl.flock(by_inode[inode], fcntl.LOCK_SH)",
        "mutations take a shared lock (LOCK_SH): nothing serializes them",
        targets=LOCAL,
    ),
    Mutant(
        "local-fsync-errors-ignored",
        _MUTATION,
        '        if self.durable:\n            fault_point("fsync")\n            os.fsync(fd)',
        '        if self.durable:\n            try:\n                fault_point("fsync")\n                os.fsync(fd)\n'
        "            except OSError:\n                pass",
        "a failed fsync is ignored: the write is acknowledged though it may not survive power loss",
        targets=LOCAL,
    ),
    Mutant(
        "local-lock-in-argument-order",
        _MUTATION,
        "            for inode in sorted(by_inode):",
        "            for inode in by_inode:",
        "locks are taken in argument order, not a global order (crossing renames deadlock)",
        targets=LOCAL,
        smoke=True,
    ),
    Mutant(
        "local-no-relink-check",
        _MUTATION,
        "            if all(chain.linked(len(chain.names)) for chain in chains):",
        "            if True:",
        "a writer keeps the lock of a directory a concurrent delete pruned (its write is lost)",
        targets=LOCAL,
    ),
    Mutant(
        "local-prune-without-lock",
        _MUTATION,
        "                fcntl.flock(chain.fds[depth], fcntl.LOCK_EX)\n                try:\n                    if not chain.linked(depth):",
        "                try:\n                    if not chain.linked(depth):",
        "pruning removes a directory without taking its lock",
        targets=LOCAL,
    ),
    Mutant(
        "local-prune-the-root",
        _MUTATION,
        "            for depth in range(len(names), 0, -1):",
        "            for depth in range(len(names), -1, -1):",
        "pruning goes one level too far (removes the adapter's root)",
        targets=LOCAL,
        equivalent="depth 0 indexes names[-1] and fds[-1]: the rmdir targets the deepest directory "
        "again, which is already gone (ENOENT stops it)",
    ),
    Mutant(
        "local-no-prune",
        _MUTATION,
        "        except _Absent:\n            return\n        self._prune(directory)",
        "        except _Absent:\n            return",
        "deletes never prune emptied directories (list_dir shows deleted prefixes)",
        targets=LOCAL,
        equivalent="list_dir reports a directory only if it holds an object (as S3 reports prefixes), so an emptied directory left behind is invisible through the API; the pruning itself is checked by tests/test_local_mutation.py",
    ),
    Mutant(
        "local-rename-failure-leaves-dst-dir",
        _MUTATION,
        "            self._prune(src_dir if moved else dst_dir)",
        "            if moved:\n                self._prune(src_dir)",
        "a failed rename leaves the destination's directory behind",
        targets=LOCAL,
    ),
    Mutant(
        "local-rename-no-token-bump",
        _MUTATION,
        "                    _date_after(fd, self._current(dst_chain, dst_name))  # dst's token chain, as in _stage",
        "                    pass",
        "rename keeps the source's mtime: the destination may get back a token it had before",
        targets=LOCAL,
        equivalent="the moved file keeps its own inode, which no earlier version of the destination can still hold while it exists, and its mtime is the time of its own publish; a repeat needs an inode reused with the same microsecond mtime and size, which only coarse-timestamp filesystems allow",
    ),
    Mutant(
        "local-orphans-ignore-age",
        _MUTATION,
        "            if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff:",
        "            if stat.S_ISREG(st.st_mode):",
        "remove_orphans ignores min_age_s",
        targets=LOCAL,
        equivalent="under the directory lock no staging file belongs to a live writer, so removing a "
        "young leftover is harmless; only the count differs, which no clause can predict",
    ),
    Mutant(
        "local-orphans-without-lock",
        _MUTATION,
        "    fcntl.flock(directory, fcntl.LOCK_EX)\n    try:\n        for name in names:",
        "    try:\n        for name in names:",
        "remove_orphans unlinks staging files without the directory lock (deletes a write in flight)",
        targets=LOCAL,
        smoke=True,
    ),
    Mutant(
        "local-orphans-loose-name",
        _MUTATION,
        '_STAGING_NAME = re.compile(rf".+#[0-9]{{{_STAGING_DIGITS}}}", re.ASCII | re.DOTALL)',
        '_STAGING_NAME = re.compile(r".*#.*", re.ASCII | re.DOTALL)',
        "remove_orphans takes any name with '#' for a staging file (deletes user objects)",
        targets=LOCAL,
    ),
    Mutant(
        "local-stage-not-cleaned",
        _MUTATION,
        '            finally:\n                fault_point("unlink")\n                os.unlink(staging, dir_fd=chain.fd)',
        "            except BaseException:\n                os.unlink(staging, dir_fd=chain.fd)\n                raise",
        "a lost create leaves its staging file behind",
        targets=LOCAL,
        equivalent="link fails only against a writer that takes no lock: under the directory lock the name is checked first, so the path that would leak the staging file is unreachable (and a leftover is never listed, and is reclaimed by remove_orphans)",
    ),
)
