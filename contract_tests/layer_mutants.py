"""The catalogues of the layers built on the adapter: realistic bugs an engineer could make in the commit
engine, its recovery, the idempotency store and the HTTP middleware, planted one at a time by
:mod:`contract_tests.mutation` and judged by each layer's own tests (``storage-adapter mutate --layer``).

Each mutant follows the rules of :mod:`contract_tests.mutants` (a function, a text that must match once
however the formatter lays it out, a replacement); ``layer`` says which catalogue it is in and so which
tests judge it; ``targets`` is not used (the tests choose their backends). ``smoke`` marks the few, cheap
to kill, that the default tier runs (``tests/test_mutation.py``).
"""

from __future__ import annotations

from dataclasses import replace

from contract_tests.mutants import Mutant

_COMMIT = "storage_adapter/engine/commit.py"
_ENGINE = "storage_adapter/engine/engine.py"
_MANIFEST = "storage_adapter/engine/manifest.py"
_TABLES = "storage_adapter/engine/tables.py"
_RECOVERY = "storage_adapter/engine/recovery.py"
_SIDECAR = "storage_adapter/engine/sidecar.py"
_LEDGER = "storage_adapter/engine/key_ledger.py"
_STORE = "storage_adapter/idempotency/store.py"
_HANDLER = "storage_adapter/idempotency/handler.py"
_RESPONSES = "storage_adapter/idempotency/responses.py"
_RECORDS = "storage_adapter/idempotency/records.py"
_KEEPER = "storage_adapter/idempotency/lease_keeper.py"
_MIDDLEWARE = "storage_adapter/http/middleware.py"
_STORED = "storage_adapter/http/stored.py"


def _layer(name: str, *mutants: Mutant) -> tuple[Mutant, ...]:
    """``mutants`` as the catalogue of layer ``name``."""
    return tuple(replace(m, layer=name) for m in mutants)


ENGINE = _layer(
    "engine",
    Mutant(
        "engine-advance-moves-first-pin-only",
        _MANIFEST,
        "Manifest.advance",
        "        for change in record.changes:\n            schema = schemas.get(change.table)",
        "        for change in record.changes[:1]:\n            schema = schemas.get(change.table)",
        "a manifest publish moves only the first table's pin: a multi-table commit is visible in part",
        bug_class="commit-atomicity",
        smoke=True,
    ),
    Mutant(
        "engine-sidecar-pin-after-version",
        _TABLES,
        "TableVersionStore.write_next",
        "            if self.write_if_absent(content):\n"
        "                return content\n"
        "            number = self.head(table, number) + 1\n"
        "            if on_taken is not None:\n"
        "                on_taken(number)\n",
        "            if self.write_if_absent(content):\n"
        "                if on_taken is not None and number != first_candidate:\n"
        "                    on_taken(number)\n"
        "                return content\n"
        "            number = self.head(table, number) + 1\n",
        "after a lost race for a version number the sidecar records the new pin after the version is "
        "written, not before: a crash between leaves a head no sidecar names",
        bug_class="commit-atomicity",
    ),
    Mutant(
        "engine-landed-trusts-a-claimed-entry",
        _ENGINE,
        "Engine._landed",
        "        if entry is not None and entry.entry.state is KeyState.PUBLISHED:\n"
        "            return entry.entry.record\n",
        "        if entry is not None:\n"
        "            return entry.entry.record if entry.entry.state is KeyState.PUBLISHED else None\n",
        "a key whose ledger entry is still claimed counts as not landed although its holder's commit is "
        "visible (published, the entry not yet marked): find_commit answers None and a retry writes before "
        "it replays",
        bug_class="replay",
    ),
    Mutant(
        "engine-entry-skips-key-replay",
        _ENGINE,
        "Engine._key_replay",
        "if key is not None and (landed := self._landed(state, key)):",
        "if False and key is not None and (landed := self._landed(state, key)):",
        "no entry point looks up a landed idempotency key before it writes: a retry writes its fragments "
        "and a sidecar and replays only at its ledger claim; precheck answers None for a landed key",
        bug_class="replay",
    ),
    Mutant(
        "engine-run-skips-watermark-replay",
        _COMMIT,
        "CommitOperation.run",
        "        if (replay := app_replay(self._manifests, state.manifest, app)) is not None:\n"
        "            return replay\n",
        "        pass\n",
        "the commit protocol does not check the application watermark: commit_fragments of an app_version "
        "already applied publishes it again",
        bug_class="replay",
    ),
    Mutant(
        "engine-watermark-strictly-above",
        _MANIFEST,
        "Manifest.applied",
        "found.version >= app[1]",
        "found.version > app[1]",
        "an application watermark equal to the commit's app_version is not a replay: a re-run applies twice",
        bug_class="replay",
    ),
    Mutant(
        "engine-expected-version-unchecked",
        _COMMIT,
        "check_expected_version",
        "if expected_version is not None and state.manifest.version != expected_version:",
        "if False:",
        "expected_version is never compared with the manifest: a commit expecting an older version publishes",
        bug_class="conflicts",
    ),
    Mutant(
        "engine-overwrite-rebases-blindly",
        _COMMIT,
        "CommitOperation._rebase",
        '            if mode == "overwrite":\n',
        '            if mode == "overwrite" and writes[name].keeps is not None:\n',
        "a whole-table overwrite that lost the publish to an append re-bases instead of conflicting: the "
        "winner's rows vanish unseen",
        bug_class="conflicts",
    ),
    Mutant(
        "engine-partition-overwrite-sees-additions-only",
        _COMMIT,
        "CommitOperation._rebased_overwrite",
        "before.symmetric_difference(after)",
        "after - before",
        "a partition overwrite re-bases over a concurrent commit that removed fragments inside its "
        "partitions (only added ones conflict)",
        bug_class="conflicts",
    ),
    Mutant(
        "engine-commit-fragments-schema-unchecked",
        _ENGINE,
        "Engine._commit",
        "if ref.schema_fingerprint != fingerprint:",
        "if False:",
        "commit_fragments accepts a fragment written with another schema than the table's",
        bug_class="schema-checks",
    ),
    Mutant(
        "engine-commit-fragments-skips-replace-where",
        _ENGINE,
        "Engine._commit",
        "                check_in_filter(table, ref.key, laid_out, filters.get(table))\n",
        "",
        "commit_fragments with replace_where publishes a fragment outside the filter (commit() checks its "
        "own fragments when it plans them; commit_fragments only here)",
        bug_class="schema-checks",
    ),
    Mutant(
        "engine-stale-fragment-whole-grace",
        _ENGINE,
        "Engine._commit",
        "oldest_allowed = datetime.now(UTC) - timedelta(seconds=self._settings.grace_s / 2)",
        "oldest_allowed = datetime.now(UTC) - timedelta(seconds=self._settings.grace_s)",
        "a fragment up to a whole grace period old is committed (vacuum may be reclaiming it), not half",
        bug_class="age-bounds",
    ),
    Mutant(
        "engine-tail-one-record-too-many",
        _MANIFEST,
        "Manifest._tail_with",
        "len(kept) >= min(TAIL, self.retention)",
        "len(kept) > min(TAIL, self.retention)",
        "the manifest keeps one record more than its tail inline (its own decoder refuses it)",
        bug_class="retention",
    ),
    Mutant(
        "engine-history-floor-one-too-old",
        _MANIFEST,
        "Manifest.history_floor",
        "return max(0, self.version - self.retention)",
        "return max(0, self.version - self.retention - 1)",
        "the retained history is taken to reach one version further back than retention keeps",
        bug_class="retention",
    ),
    Mutant(
        "engine-history-stored-after-cas",
        _MANIFEST,
        "ManifestStore.publish",
        "        map_bounded(lambda stored: self._adapter.write_if_absent(*stored), objects)\n"
        "        if table_map is not None:\n",
        "        if table_map is not None:\n",
        "the records a publish drops from the tail and its table map are not written before the CAS (a "
        "manifest may name a missing map or lose a retained record)",
        bug_class="settle-order",
    ),
)

RECOVERY = _layer(
    "recovery",
    Mutant(
        "recovery-roll-back-to-sidecar-pin",
        _RECOVERY,
        "Recovery._restore_content",
        "self._versions.fragments(table.table, table.manifest_pin)",
        "self._versions.fragments(table.table, table.expected)",
        "a roll-back restores the content of the version the sidecar pinned when the writer started, not "
        "the version the manifest pins now",
        bug_class="roll-back-target",
    ),
    Mutant(
        "recovery-roll-back-keeps-our-head",
        _RECOVERY,
        "Recovery._roll_back",
        '            if ours.kind == "restore":',
        '            if ours.kind != "":',
        "a roll-back takes every head of ours for a finished restore: the unpublished head stays the "
        "table's newest version",
        bug_class="roll-back-target",
    ),
    Mutant(
        "recovery-roll-forward-ignores-key-holder",
        _RECOVERY,
        "Recovery.resolve",
        "if found.decision is Decision.ROLL_FORWARD and not self._holds_key(sidecar):",
        "if False:",
        "a crashed commit is rolled forward although another operation holds its idempotency key",
        bug_class="roll-forward",
    ),
    Mutant(
        "recovery-roll-forward-ignores-watermark",
        _RECOVERY,
        "Recovery.resolve",
        "if found.decision is Decision.ROLL_FORWARD and state.manifest.applied(sidecar.app) is not None:",
        "if False:",
        "a crashed commit is rolled forward although a re-run already moved its application's watermark",
        bug_class="roll-forward",
    ),
    Mutant(
        "recovery-fenced-operation-rolled-forward",
        _RECOVERY,
        "Recovery.classify",
        "elif states == {TableState.ROLLED_FORWARD_EXACT} and not fenced:",
        "elif states == {TableState.ROLLED_FORWARD_EXACT}:",
        "an operation a heal fenced is rolled forward by a later heal",
        bug_class="roll-forward",
    ),
    Mutant(
        "recovery-no-fence-before-roll-back",
        _RECOVERY,
        "Recovery.resolve",
        "                and not writer_surely_dead(sidecar, self._root)\n",
        "                and False\n",
        "a heal rolls back the commit of a writer presumed dead by its lease without fencing it first",
        bug_class="fencing",
    ),
    Mutant(
        "recovery-exact-without-head-check",
        _RECOVERY,
        "Recovery._classify_table",
        "if pin_is_ours and head == pin.post_commit_pin:",
        "if pin_is_ours:",
        "a table whose pinned version is ours is ROLLED_FORWARD_EXACT even when a later head exists",
        bug_class="roll-forward",
    ),
    Mutant(
        "recovery-sidecar-deleted-before-settling",
        _RECOVERY,
        "Recovery._finish",
        "        if sidecar.idempotency_key is not None:\n            if published is not None:\n",
        "        self._sidecars.delete(sidecar.operation_id)\n"
        "        if sidecar.idempotency_key is not None:\n"
        "            if published is not None:\n",
        "recovery deletes the sidecar before it settles the key's ledger entry and audits: a crash between "
        "leaves a claimed key nobody will resolve",
        bug_class="settle-order",
    ),
    Mutant(
        "recovery-light-heal-skips-old-sidecars",
        _RECOVERY,
        "Recovery.heal",
        "in_lease = young is not None and not codec.written_before(info, young)",
        "in_lease = young is not None",
        "the light heal of every commit skips every sidecar, not just those written within the lease: a "
        "dead writer's commit waits for a full heal",
        bug_class="liveness",
    ),
    Mutant(
        "sidecar-same-host-pid-ignored",
        _SIDECAR,
        "writer_alive",
        "    if sidecar.host == HOST and not _pid_running(sidecar.pid):\n        return False\n",
        "",
        "a same-host writer whose process is gone is judged alive until its lease expires",
        bug_class="liveness",
    ),
    Mutant(
        "sidecar-in-process-writer-by-lease",
        _SIDECAR,
        "writer_alive",
        "    if sidecar.host == HOST and sidecar.pid == os.getpid():\n"
        "        return LIVE.is_live(root, sidecar.operation_id)\n",
        "",
        "a writer of this process that has returned is judged by its lease, not by the live registry",
        bug_class="liveness",
    ),
    Mutant(
        "sidecar-lease-renewed-once-a-lease",
        _SIDECAR,
        "LeaseKeeper.renew_if_due",
        "if time.monotonic() - self._written_at < self._lease_s / 2:",
        "if time.monotonic() - self._written_at < self._lease_s:",
        "a writer renews its lease only once the whole lease has passed (it expires first), not half",
        bug_class="age-bounds",
    ),
    Mutant(
        "ledger-release-of-another-holder",
        _LEDGER,
        "KeyLedger.release",
        "if stored is None or stored.entry.operation_id != operation_id:",
        "if stored is None:",
        "releasing a key deletes its entry whoever holds it: a roll-back frees a retry's claim",
        bug_class="key-ledger",
    ),
    Mutant(
        "ledger-publish-over-another-holder",
        _LEDGER,
        "KeyLedger.publish",
        "if stored is None or stored.entry.operation_id != record.operation_id:",
        "if stored is None:",
        "a commit marks its key published over the claim of another operation",
        bug_class="key-ledger",
    ),
)

IDEMPOTENCY = _layer(
    "idempotency",
    Mutant(
        "idem-binding-ignores-resource",
        _HANDLER,
        "claim_once",
        "if record.binding != binding:",
        "if (record.operation, record.fingerprint) != (request.operation, fingerprint):",
        "a reused key is compared by operation and fingerprint only: the same payload on another resource "
        "is answered with the first resource's outcome",
        bug_class="fingerprint",
    ),
    Mutant(
        "idem-fingerprint-key-order-matters",
        _RECORDS,
        "canonical_json",
        "value, sort_keys=True,",
        "value, sort_keys=False,",
        "canonical JSON keeps the object's key order: a retry that orders its keys otherwise is a 422",
        bug_class="fingerprint",
    ),
    Mutant(
        "idem-fingerprint-bytes-as-json",
        "storage_adapter/idempotency/fingerprint.py",
        "payload_fingerprint",
        'return "sha256:" + hashlib.sha256(kind + body).hexdigest()',
        'return "sha256:" + hashlib.sha256(body).hexdigest()',
        "the fingerprint leaves out whether the payload was bytes or JSON: b'1' and 1 are the same request",
        bug_class="fingerprint",
    ),
    Mutant(
        "idem-stale-without-skew-grace",
        _STORE,
        "IdempotencyStore.is_lease_stale",
        "self.clock() > record.lease_expires_at + self.skew_grace",
        "self.clock() > record.lease_expires_at",
        "a lease is taken over as soon as it expires by the reader's clock, without the skew grace",
        bug_class="age-bounds",
    ),
    Mutant(
        "idem-keeper-margin-added",
        _KEEPER,
        "LeaseKeeper._beat",
        "outcome.owned.record.lease_expires_at - self.margin",
        "outcome.owned.record.lease_expires_at + self.margin",
        "an owner whose heartbeats fail counts itself the owner until a margin after its lease, not before",
        bug_class="fencing",
    ),
    Mutant(
        "idem-transition-skips-fence",
        _STORE,
        "IdempotencyStore._transition",
        "                if current.reservation_id != mine.reservation_id:\n"
        "                    return LostOwnership(current)\n",
        "",
        "after a missed CAS a transition re-reads and writes over whatever reservation now holds the record",
        bug_class="fencing",
    ),
    Mutant(
        "idem-cancelled-taken-by-another-request",
        _STORE,
        "IdempotencyStore.reserve",
        "if existing.status is not RecordStatus.CANCELLED or existing.binding != fresh.binding:",
        "if existing.status is not RecordStatus.CANCELLED:",
        "a cancelled record is taken over by a request bound to another operation, resource or payload",
        bug_class="fingerprint",
    ),
    Mutant(
        "idem-5xx-replayable",
        _RESPONSES,
        "is_replayable",
        "return 200 <= status < 400 or (400 <= status < 500 and status not in NON_DETERMINISTIC_4XX)",
        "return 200 <= status < 600 and status not in NON_DETERMINISTIC_4XX",
        "a 5xx outcome is stored and replayed",
        bug_class="status-classification",
        smoke=True,
    ),
    Mutant(
        "idem-time-dependent-4xx-stored",
        _RESPONSES,
        "is_replayable",
        "(400 <= status < 500 and status not in NON_DETERMINISTIC_4XX)",
        "(400 <= status < 500)",
        "a 401, 403, 408 or 429 (time or credentials) is stored and replayed",
        bug_class="status-classification",
    ),
    Mutant(
        "idem-abandon-trusts-exceptions",
        _HANDLER,
        "Ownership.abandon",
        "subtype = None if isinstance(exc, NoEffect) else OUTCOME_UNSETTLED",
        "subtype = None",
        "a handler that raised after its effect leaves a plainly cancelled record: the retry runs it again",
        bug_class="replay",
    ),
    Mutant(
        "idem-purge-live-lease",
        _STORE,
        "IdempotencyStore._purgeable",
        "record.status is not RecordStatus.IN_PROGRESS or self.is_lease_stale(record)",
        "True",
        "purge deletes an expired in-progress record whose owner's lease is live",
        bug_class="retention",
    ),
    Mutant(
        "idem-purge-at-expiry",
        _STORE,
        "IdempotencyStore._purgeable",
        "if record.expires_at >= before:",
        "if record.expires_at > before:",
        "purge deletes a record that expires exactly at 'before' (it is still within its lifetime)",
        bug_class="retention",
    ),
    Mutant(
        "idem-tombstone-whole-grace",
        _STORE,
        "IdempotencyStore._tombstone_and_delete",
        "if self.clock() - tombstoned_at > self.tombstone_grace / 2:",
        "if self.clock() - tombstoned_at > self.tombstone_grace:",
        "a purger deletes its tombstone up to a whole grace after writing it, when another may adopt it",
        bug_class="age-bounds",
    ),
    Mutant(
        "idem-attachment-read-unbounded",
        _STORE,
        "IdempotencyStore.attachment",
        "        if described.size > self.max_attachment_bytes:\n",
        "        if False:\n",
        "an attachment described as larger than max_attachment_bytes is read anyway",
        bug_class="size-bounds",
    ),
    Mutant(
        "idem-summary-limit-off-by-one",
        _STORE,
        "IdempotencyStore.finalize",
        "if size > self.max_summary_bytes:",
        "if size >= self.max_summary_bytes:",
        "an outcome of exactly max_summary_bytes is refused",
        bug_class="size-bounds",
    ),
)

HTTP = _layer(
    "http",
    Mutant(
        "http-fingerprint-ignores-query",
        _MIDDLEWARE,
        "IdempotencyMiddleware._idempotent",
        '            "query": scope.get("query_string", b"").decode("latin-1"),\n',
        "",
        "the request fingerprint leaves out the query string: the same key with another query is replayed",
        bug_class="fingerprint",
    ),
    Mutant(
        "http-fingerprint-body-length",
        _MIDDLEWARE,
        "IdempotencyMiddleware._idempotent",
        '"body": hashlib.sha256(body).hexdigest(),',
        '"body": len(body),',
        "the request fingerprint takes the body's length, not its digest: another body of the same size "
        "is replayed",
        bug_class="fingerprint",
    ),
    Mutant(
        "http-realm-left-out",
        _MIDDLEWARE,
        "IdempotencyMiddleware._idempotent",
        "request = IdempotentRequest(realm, key, route.operation, resource, payload)",
        'request = IdempotentRequest("default", key, route.operation, resource, payload)',
        "every request's key is kept in one realm: two principals' keys meet",
        bug_class="http-framing",
    ),
    Mutant(
        "http-outcome-stored-after-last-chunk",
        _MIDDLEWARE,
        "_Capture.send",
        "            if self.complete and not self.holding:\n"
        "                await self.settle(self)\n"
        "                self.settled = True\n"
        "        if self.holding:\n"
        "            self.held.append(message)\n"
        "        else:\n"
        "            await self._forward(message)\n",
        "            pass\n"
        "        if self.holding:\n"
        "            self.held.append(message)\n"
        "        else:\n"
        "            await self._forward(message)\n"
        '        if kind == "http.response.body" and self.complete and not self.holding:\n'
        "            await self.settle(self)\n"
        "            self.settled = True\n",
        "the outcome is stored after the last body chunk went out: a client can hold the whole response "
        "while a retry finds the key in progress, and a background task runs before it is stored",
        bug_class="settle-order",
    ),
    Mutant(
        "http-500-not-held",
        _MIDDLEWARE,
        "_Capture.send",
        "self.holding = self.status >= 500",
        "self.holding = self.status > 500",
        "a 500 is streamed and settled at its last chunk instead of held until the app returns",
        bug_class="status-classification",
    ),
    Mutant(
        "http-5xx-settled-as-no-effect",
        _MIDDLEWARE,
        "IdempotencyMiddleware._settle",
        "maybe_applied = result.status not in NON_DETERMINISTIC_4XX",
        "maybe_applied = False",
        "an app's 5xx cancels the record plainly: the retry runs the app again without reconciling",
        bug_class="status-classification",
    ),
    Mutant(
        "http-response-limit-off-by-one",
        _MIDDLEWARE,
        "IdempotencyMiddleware._result",
        "if capture.size <= self.max_response_bytes:",
        "if capture.size < self.max_response_bytes:",
        "a response body of exactly max_response_bytes is not stored for replay",
        bug_class="size-bounds",
    ),
    Mutant(
        "http-request-limit-off-by-one",
        _MIDDLEWARE,
        "_read_body",
        "if len(body) > limit:",
        "if len(body) >= limit:",
        "a request body of exactly max_request_bytes is refused 413",
        bug_class="size-bounds",
    ),
    Mutant(
        "http-two-keys-take-the-first",
        _MIDDLEWARE,
        "IdempotencyMiddleware._idempotent",
        "if len(keys) > 1:",
        "if len(keys) > 2:",
        "a request with two Idempotency-Key headers runs under the first instead of being refused 400",
        bug_class="http-framing",
    ),
    Mutant(
        "http-replay-unmarked",
        _MIDDLEWARE,
        "IdempotencyMiddleware._answer",
        '        if response.replayed:\n            headers.append(("idempotent-replayed", "true"))\n',
        "",
        "a replayed answer does not carry idempotent-replayed: true",
        bug_class="http-framing",
        smoke=True,
    ),
    Mutant(
        "http-in-progress-status-ignored",
        _MIDDLEWARE,
        "IdempotencyMiddleware._answer",
        "            status = self.settings.in_progress_status\n",
        "            pass\n",
        "a duplicate in progress is answered 409 whatever in_progress_status says (Iceberg's clients "
        "retry only the 503)",
        bug_class="status-classification",
    ),
    Mutant(
        "http-root-path-without-boundary",
        _MIDDLEWARE,
        "route_path",
        'if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):',
        "if root and path.startswith(root):",
        "the root path is cut from a path that merely starts with its text (/apix/v1 under /api)",
        bug_class="http-framing",
        equivalent="a cut without a segment boundary leaves a path without its leading slash, which no "
        "route template (each starts with /) matches: the request passes through as with the real rule",
    ),
    Mutant(
        "http-disconnect-taken-for-the-end",
        _MIDDLEWARE,
        "_read_body",
        '        if message["type"] == "http.disconnect":\n            return None\n',
        '        if message["type"] == "http.disconnect":\n            return bytes(body)\n',
        "a client that left before its body was complete has its request run on the part received",
        bug_class="size-bounds",
    ),
    Mutant(
        "stored-content-encoding-dropped",
        _STORED,
        "kept_headers",
        "kept = allowed | ALWAYS_REPLAYED",
        "kept = allowed",
        "a replay leaves out content-encoding unless configured: a gzipped body is replayed unreadable",
        bug_class="http-framing",
    ),
)
