"""`Store`: the async API the server uses to keep users, conversations and vaults.

The rules:
- Every method is one transaction, all or nothing; failures surface as `StoreError`s that
  name their cause, never as driver exceptions, and never with a stored value in them.
- Text that reaches the database is tokenized text; original values go in only through
  `assign_tokens`/`update_vault`, `save_term_list`, `save_team_detector` and
  `begin_reply`'s `spellings`, which seal them with the vault key.
- Every conversation method takes the owner; another user's conversation is "not found".
- Opening a store migrates the schema to head (unless told not to) and refuses a vault key
  that is not the database's.
- A streaming reply is saved as it goes (`reply_checkpoints`), every second or every 2 KiB,
  so a crash loses at most one checkpoint of what its user saw.
- A conversation's vault is bounded (`max_vault_entries`); past it, an update is refused
  whole (`VaultFullError`).
- On SQLite, deleting a conversation also checkpoints the WAL, so the deleted vault's
  ciphertext (already overwritten in the main file by `secure_delete`) leaves the WAL too.
- A team (issue 17): users are admins or members, groups get reveal levels, owners share
  conversations with users and groups, and reveals and admin actions leave a trail that
  names tokens, kinds and names, never values (`team.py`, `sharing.py`, `audit_log.py`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal

from sqlalchemy.ext.asyncio import AsyncSession

from holdback.reveal import Rules
from holdback.store import (
    accounts,
    audit_log,
    branches,
    chat_reads,
    checkpoints,
    conversations,
    key_check,
    leases,
    reply_frames,
    sharing,
    team,
    term_lists,
    turns,
    vault,
)
from holdback.store import spellings as spellings_module
from holdback.store import team_detectors as team_detector_rows
from holdback.store.crypto import VaultKey
from holdback.store.database import Database
from holdback.store.driver_errors import DRIVER_ERRORS
from holdback.store.engine import DatabaseTarget, create_engine, parse_database_url
from holdback.store.errors import StoreError
from holdback.store.migrate import check_schema, upgrade
from holdback.store.records import (
    Access,
    AdminEvent,
    ApiToken,
    AuditEvent,
    Conversation,
    Group,
    LevelSetting,
    Message,
    RevealEvent,
    Share,
    SharedConversation,
    Spellings,
    StoredVault,
    TermList,
    Turn,
    User,
    VaultItem,
    VaultUpdate,
)
from holdback.store.runner import Runner

log = logging.getLogger(__name__)


class Store:
    """Persistence for holdback. Create it with `await Store.open(url, vault_key=key)`."""

    def __init__(
        self,
        db: Database,
        vault_key: VaultKey,
        *,
        max_vault_entries: int = vault.MAX_VAULT_ENTRIES,
        checkpoint_interval: float = checkpoints.DEFAULT_INTERVAL,
        checkpoint_bytes: int = checkpoints.DEFAULT_SIZE,
    ) -> None:
        if max_vault_entries < 1:
            raise ValueError("a vault must be allowed at least one entry")
        self._db = db
        self._key = vault_key
        self.max_vault_entries = max_vault_entries
        self._journal = checkpoints.Journal(db, interval=checkpoint_interval, size=checkpoint_bytes)
        self._touched: dict[str, float] = {}  # API token id -> when this process last touched it

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        vault_key: VaultKey,
        migrate: bool = True,
        busy_timeout: float = 5.0,
        connect_timeout: float = 10.0,
        max_vault_entries: int = vault.MAX_VAULT_ENTRIES,
        checkpoint_interval: float = checkpoints.DEFAULT_INTERVAL,
        checkpoint_bytes: int = checkpoints.DEFAULT_SIZE,
        synchronous: str = "normal",
    ) -> Store:
        """Connect, migrate to head (if `migrate`), and check the vault key.

        `max_vault_entries` bounds each conversation's vault (tokens and reserved ids); a
        streaming reply is saved at least every `checkpoint_interval` seconds or every
        `checkpoint_bytes` bytes of released text (`reply_checkpoints`). `synchronous` is
        SQLite's level, "normal" or "full" (docs/storage.md).
        """
        checkpoints.check_bounds(checkpoint_interval, checkpoint_bytes)
        if max_vault_entries < 1:
            raise ValueError("a vault must be allowed at least one entry")
        target = parse_database_url(url)
        if migrate:
            await upgrade(url, busy_timeout=busy_timeout)
        engine = create_engine(
            target,
            busy_timeout=busy_timeout,
            connect_timeout=connect_timeout,
            synchronous=synchronous,
        )
        db = Database(engine, target, busy_timeout=busy_timeout, synchronous=synchronous)
        try:
            try:
                await check_schema(engine, target)
            except StoreError:
                raise
            except DRIVER_ERRORS as exc:
                raise db.translate(exc) from None
            where = target.describe()

            async def adopt(session: AsyncSession) -> None:
                await key_check.adopt_or_verify(session, vault_key, where)

            await db.write(adopt, what="checking the vault key")
            return cls(
                db,
                vault_key,
                max_vault_entries=max_vault_entries,
                checkpoint_interval=checkpoint_interval,
                checkpoint_bytes=checkpoint_bytes,
            )
        except BaseException:
            await db.dispose()
            raise

    async def close(self) -> None:
        await self._journal.close()
        await self._db.dispose()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def checkpoint_rounds(self) -> int:
        """How many checkpoint rounds (one transaction each) have committed."""
        return self._journal.rounds

    async def until_checkpoint_rounds(self, rounds: int) -> None:
        """Wait until `rounds` checkpoint rounds have committed (for tests and tools)."""
        await self._journal.until_rounds(rounds)

    @property
    def database(self) -> Database:
        """The underlying engine and target (for maintenance tools and tests)."""
        return self._db

    # Users and authentication.

    async def create_user(self, name: str, password_hash: str | None) -> User:
        """A new user (`UserExistsError` if the name is taken). The first user is an admin,
        every later one a member; the role is decided inside the write transaction, under a
        lock, so of two users created at once on an empty database exactly one is admin."""
        accounts.check_name(name, "user")
        return await self._db.write(
            lambda s: team.create_user(s, name, password_hash), what="creating a user"
        )

    async def get_user_by_name(self, name: str) -> User | None:
        return await self._db.read(lambda s: accounts.user_by_name(s, name))

    async def get_user(self, user_id: str) -> User | None:
        return await self._db.transact(
            lambda run: accounts.user_with_id(run, user_id), write=False, what="reading a user"
        )

    async def ensure_local_user(self) -> User:
        """The single user of `--auth none`, an admin, created (or made an admin) on first use
        (concurrency-safe)."""
        name = accounts.LOCAL_USER_NAME
        found = await self.get_user_by_name(name)
        if found is not None and found.is_admin:
            return found
        return await self._db.write(
            lambda s: team.ensure_admin(s, name), what="creating the local user"
        )

    async def create_session(self, user_id: str, ttl: timedelta) -> str:
        """A new login session; returns its secret, of which only a hash is stored."""
        return await self._db.write(
            lambda s: accounts.insert_session(s, user_id, ttl), what="creating a session"
        )

    async def user_for_session(self, secret: str) -> User | None:
        user, expired = await self._db.transact(
            lambda run: accounts.session_user(run, secret), write=False, what="checking a session"
        )
        if expired:
            await self.delete_session(secret)
        return user

    async def delete_session(self, secret: str) -> None:
        await self._db.write(lambda s: accounts.remove_session(s, secret), what="ending a session")

    async def delete_expired_sessions(self) -> int:
        return await self._db.write(
            accounts.remove_expired_sessions, what="deleting expired sessions"
        )

    async def create_api_token(self, user_id: str, name: str) -> str:
        """A new API token; the text is returned once and only its hash is stored."""
        accounts.check_name(name, "API token")
        return await self._db.write(
            lambda s: accounts.insert_api_token(s, user_id, name), what="creating an API token"
        )

    async def user_for_api_token(self, token: str) -> User | None:
        """The user a live token acts for: None if it is unknown, revoked, or its user is
        disabled."""
        found = await self._db.transact(
            lambda run: accounts.api_token_user(run, token),
            write=False,
            what="checking an API token",
        )
        if found is None:
            return None
        user, token_id = found
        try:
            await self.touch_api_token(token_id)
        except StoreError as exc:  # a use that could not be noted does not refuse the token
            log.warning("could not note an API token's use: %s", type(exc).__name__)
        return user

    async def set_password(self, name: str, password_hash: str) -> User:
        """A new password hash for the user `name` (`UserNotFoundError`); their sessions
        end, their API tokens stay."""
        return await self._db.write(
            lambda s: accounts.set_password(s, name, password_hash), what="setting a password"
        )

    async def disable_user(self, name: str) -> tuple[User, bool]:
        """Disable a user (`UserNotFoundError` if none has that name): they can no longer
        sign in, their sessions are deleted and their API tokens name nobody until they are
        enabled again. Returns the user and whether they were enabled until now."""
        return await self._db.write(
            lambda s: accounts.set_disabled(s, name, True), what="disabling a user"
        )

    async def enable_user(self, name: str) -> tuple[User, bool]:
        """Enable a disabled user again; returns the user and whether they were disabled."""
        return await self._db.write(
            lambda s: accounts.set_disabled(s, name, False), what="enabling a user"
        )

    async def list_api_tokens(self, user_id: str | None = None) -> list[ApiToken]:
        """Every API token (or one user's), oldest first: ids and names, never their text."""
        return await self._db.read(lambda s: accounts.api_tokens(s, user_id))

    async def find_api_token(self, token: str) -> ApiToken | None:
        """The listing of the token whose text this is, revoked or not."""
        return await self._db.read(lambda s: accounts.api_token_by_secret(s, token))

    async def revoke_api_token(self, token_id: str) -> tuple[ApiToken, bool]:
        """Revoke a token for good (`RecordNotFoundError` for an unknown id); returns it and
        whether it was live until now."""
        return await self._db.write(
            lambda s: accounts.revoke_api_token(s, token_id), what="revoking an API token"
        )

    async def touch_api_token(self, token_id: str) -> None:
        """Note that the token was used now (`ApiToken.last_used_at`): at most one write per
        token a minute, and none at all from this process within a minute of its last."""
        now = time.monotonic()
        interval = audit_log.TOUCH_INTERVAL.total_seconds()
        last = self._touched.get(token_id)
        if last is not None and now - last < interval:
            return
        if len(self._touched) >= 4096:
            self._touched = {k: t for k, t in self._touched.items() if now - t < interval}
        self._touched[token_id] = now
        when = datetime.now(UTC)
        await self._db.write(
            lambda s: audit_log.touch_token(s, token_id, when), what="noting an API token's use"
        )

    # Roles (admins and members).

    async def set_role(self, name: str, role: str) -> tuple[User, bool]:
        """Make the user `name` an admin or a member (`UserNotFoundError`, or
        `InvalidRecordError` for another role); returns the user and whether it changed.
        The last admin cannot be made a member (`LastAdminError`)."""
        team.check_role(role)
        return await self._db.write(lambda s: team.set_role(s, name, role), what="setting a role")

    async def list_users(self) -> list[User]:
        """Every user, oldest first."""
        return await self._db.read(team.all_users)

    async def delete_user(self, name: str, *, conversations_to: str | None) -> int:
        """Delete the user `name` with their sessions, API tokens, memberships and the shares
        given to them; returns how many conversations they owned.

        Their conversations go to the admin named `conversations_to` (who then owns them,
        with their shares), or with None are deleted with their messages and vaults: the
        vault rows, ciphertexts included, are deleted in the same transaction
        (crypto-shredding; on SQLite the WAL is checkpointed afterwards, as
        `delete_conversation` does). The last admin cannot be deleted (`LastAdminError`);
        an unknown user is `UserNotFoundError`, an heir who is not an admin
        `InvalidRecordError`. The trails (reveal and admin events) keep the user's id.
        """
        owned = await self._db.write(
            lambda s: team.remove_user(s, name, conversations_to), what="deleting a user"
        )
        if owned and conversations_to is None and self._db.dialect == "sqlite":
            await self._db.autocommit("PRAGMA wal_checkpoint(TRUNCATE)")
        return owned

    # Groups.

    async def create_group(self, name: str) -> Group:
        """A new, empty group (`GroupExistsError` if the name is taken)."""
        accounts.check_name(name, "group")
        return await self._db.write(lambda s: team.create_group(s, name), what="creating a group")

    async def rename_group(self, old: str, new: str) -> Group:
        """Rename a group (`GroupNotFoundError`, `GroupExistsError`); its id, members, levels
        and shares stay."""
        accounts.check_name(new, "group")
        return await self._db.write(
            lambda s: team.rename_group(s, old, new), what="renaming a group"
        )

    async def delete_group(self, name: str) -> None:
        """Delete a group with its memberships, shares and reveal levels
        (`GroupNotFoundError` if there is none of that name)."""
        await self._db.write(lambda s: team.remove_group(s, name), what="deleting a group")

    async def get_group(self, name: str) -> Group | None:
        return await self._db.read(lambda s: team.one_group(s, name))

    async def list_groups(self) -> list[Group]:
        """Every group by name, with its members' names."""
        return await self._db.read(team.all_groups)

    async def add_member(self, group: str, user: str) -> bool:
        """Add the user named `user` to the group; False if they already were in it."""
        return await self._db.write(
            lambda s: team.add_member(s, group, user), what="adding a group member"
        )

    async def remove_member(self, group: str, user: str) -> bool:
        """Remove the user from the group; False if they were not in it."""
        return await self._db.write(
            lambda s: team.remove_member(s, group, user), what="removing a group member"
        )

    async def groups_of(self, user_id: str) -> list[str]:
        """The ids of the user's groups (what `Rules.for_viewer` takes), sorted."""
        return await self._db.read(lambda s: team.groups_of(s, user_id))

    # Reveal levels.

    async def set_level(self, group: str | None, kind: str, level: str) -> bool:
        """Set how values of `kind` are shown to viewers who do not own the conversation: for
        the organisation (`group` None) or for a group's members (by name). Returns whether
        it changed."""
        team.check_kind(kind)
        checked = team.check_reveal_level(level)
        return await self._db.write(
            lambda s: team.set_level(s, group, kind, checked), what="setting a reveal level"
        )

    async def clear_level(self, group: str | None, kind: str) -> bool:
        """Remove a level set with `set_level`; False if there was none."""
        team.check_kind(kind)
        return await self._db.write(
            lambda s: team.clear_level(s, group, kind), what="clearing a reveal level"
        )

    async def never_restore(self, kind: str) -> bool:
        """Show values of `kind` plain to nobody, owners included; False if already so."""
        team.check_kind(kind)
        return await self._db.write(
            lambda s: team.never_restore(s, kind), what="marking a kind never restored"
        )

    async def allow_restore(self, kind: str) -> bool:
        """Undo `never_restore`; False if the kind was not marked."""
        team.check_kind(kind)
        return await self._db.write(
            lambda s: team.allow_restore(s, kind), what="allowing a kind to be restored"
        )

    async def reveal_rules(self) -> Rules:
        """The organisation's rules: default levels, each group's (keyed by group id) and the
        never-restored kinds, read in one transaction."""
        return await self._db.read(team.rules)

    async def list_levels(self) -> list[LevelSetting]:
        """Every level set, for display: the organisation's first, then each group's."""
        return await self._db.read(team.levels)

    # Sharing.

    async def share(
        self,
        conversation_id: str,
        owner_id: str,
        *,
        user: str | None = None,
        group: str | None = None,
        access: Literal["read", "write"],
    ) -> Share:
        """Share the owner's conversation with one user or one group (by name), to read or to
        write. Sharing again with the same user or group changes the access of that share
        (same id). `ConversationNotFoundError` unless `owner_id` owns it; sharing with the
        owner is refused (`InvalidRecordError`)."""
        checked = sharing.check_share(user, group, access)
        return await self._db.write(
            lambda s: sharing.share(s, conversation_id, owner_id, user, group, checked),
            what="sharing a conversation",
        )

    async def list_shares(self, conversation_id: str, owner_id: str) -> list[Share]:
        """The conversation's shares, oldest first (`ConversationNotFoundError` unless
        `owner_id` owns it)."""
        return await self._db.read(lambda s: sharing.shares_of(s, conversation_id, owner_id))

    async def unshare(self, conversation_id: str, owner_id: str, share_id: str) -> bool:
        """Withdraw a share; False if the conversation has no share of that id."""
        return await self._db.write(
            lambda s: sharing.unshare(s, conversation_id, owner_id, share_id),
            what="withdrawing a share",
        )

    async def access_of(self, conversation_id: str, viewer_id: str) -> Access | None:
        """`owner`, `write` or `read` (the best of the viewer's own share and their groups'),
        or None: no such conversation, no share, or a disabled or unknown viewer."""
        return await self._db.read(lambda s: sharing.access_of(s, conversation_id, viewer_id))

    async def standing_of(
        self, conversation_id: str, viewer_id: str
    ) -> tuple[Access, list[str]] | None:
        """`access_of` and, if the viewer has access, `groups_of`, in one read."""

        async def read(session: AsyncSession) -> tuple[Access, list[str]] | None:
            access = await sharing.access_of(session, conversation_id, viewer_id)
            if access is None:
                return None
            return access, [] if access == "owner" else await team.groups_of(session, viewer_id)

        return await self._db.read(read)

    async def shared_with(self, viewer_id: str) -> list[SharedConversation]:
        """The conversations others shared with the viewer, directly or through a group, most
        recently updated first, each with its owner's name and the viewer's access."""
        return await self._db.read(lambda s: sharing.shared_with(s, viewer_id))

    # The trails: reveals and admin actions.

    async def record_reveals(
        self,
        viewer_id: str | None,
        conversation_id: str | None,
        message_id: str | None,
        items: Sequence[tuple[str, str, str]],
    ) -> int:
        """Record that each `(token, kind, level)` was shown to the viewer, in one
        transaction; only `plain` and `masked` are recorded (a label shows nothing of a
        value). Returns how many rows were written. Never takes a value."""
        for value, what in ((viewer_id, "viewer"), (conversation_id, "conversation"),
                            (message_id, "message")):  # fmt: skip
            audit_log.check_id(value, what)
        kept = audit_log.check_reveals(items)
        if kept:
            await self._db.write(
                lambda s: audit_log.insert_reveals(s, viewer_id, conversation_id, message_id, kept),
                what="recording reveals",
            )
        return len(kept)

    async def record_read(
        self,
        viewer_id: str | None,
        conversation_id: str,
        shown: Sequence[tuple[str | None, Sequence[tuple[str, str, str]]]],
    ) -> int:
        """`record_reveals` for one read of a conversation: `(message id or None for the
        title, items)` per part shown, all in one transaction. Returns the rows written."""
        audit_log.check_id(viewer_id, "viewer")
        audit_log.check_id(conversation_id, "conversation")
        parts = []
        for message_id, items in shown:
            audit_log.check_id(message_id, "message")
            kept = audit_log.check_reveals(items)
            if kept:
                parts.append((message_id, kept))
        if parts:

            async def write(session: AsyncSession) -> None:
                for message_id, kept in parts:
                    await audit_log.insert_reveals(
                        session, viewer_id, conversation_id, message_id, kept
                    )

            await self._db.write(write, what="recording reveals")
        return sum(len(kept) for _, kept in parts)

    async def record_admin(self, actor_id: str | None, action: str, target: str) -> None:
        """Record an admin's action (`user.delete`) on a target named by name (`ada`)."""
        audit_log.check_id(actor_id, "user")
        audit_log.check_admin(action, target)
        await self._db.write(
            lambda s: audit_log.insert_admin(s, actor_id, action, target),
            what="recording an admin event",
        )

    async def list_reveal_events(
        self,
        *,
        viewer_id: str | None = None,
        conversation_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 1000,
    ) -> list[RevealEvent]:
        """Reveal events, newest first, filtered; `since` inclusive, `until` exclusive."""
        audit_log.check_window(since, until, limit)
        return await self._db.read(
            lambda s: audit_log.reveal_events(s, viewer_id, conversation_id, since, until, limit)
        )

    async def list_admin_events(
        self,
        *,
        actor_id: str | None = None,
        action: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 1000,
    ) -> list[AdminEvent]:
        """Admin events, newest first, filtered; `since` inclusive, `until` exclusive."""
        audit_log.check_window(since, until, limit)
        return await self._db.read(
            lambda s: audit_log.admin_events(s, actor_id, action, since, until, limit)
        )

    # Conversations.

    async def owner_of(self, conversation_id: str) -> str | None:
        """The id of a conversation's owner (for callers that checked the viewer's access)."""
        return await self._db.transact(
            lambda run: chat_reads.owner(run, conversation_id), write=False, what="reading an owner"
        )

    @staticmethod
    def new_conversation_id() -> str:
        """An id for a conversation that `update_vault` or `begin_reply` will create
        (`create_for`), so a new conversation costs no transaction of its own."""
        return accounts.new_id()

    async def create_conversation(self, owner_id: str, title: str = "") -> Conversation:
        conversations.check_title(title)
        return await self._db.transact(
            lambda run: turns.create(run, owner_id, title),
            write=True,
            what="creating a conversation",
        )

    async def list_conversations(self, owner_id: str) -> list[Conversation]:
        """The owner's conversations, most recently updated first."""

        return await self._db.read(lambda s: conversations.owned_conversations(s, owner_id))

    async def get_conversation(self, conversation_id: str, owner_id: str) -> Conversation | None:
        async def work(session: AsyncSession) -> Conversation | None:
            row = await conversations.owned_conversation(session, conversation_id, owner_id)
            return conversations.to_conversation(row) if row is not None else None

        return await self._db.read(work)

    async def rename_conversation(self, conversation_id: str, owner_id: str, title: str) -> bool:
        conversations.check_title(title)
        return await self._db.transact(
            lambda run: turns.rename(run, conversation_id, owner_id, title),
            write=True,
            what="renaming a conversation",
        )

    # Branches, a conversation's settings, and a user's instructions (`branches.py`).

    async def message_of(self, message_id: str) -> Message | None:
        """A message by its id, in whichever conversation (the caller checks access)."""
        return await self._db.read(lambda s: branches.message_of(s, message_id))

    async def choose_branch(self, conversation_id: str, owner_id: str, message_id: str) -> bool:
        """Show the branch through `message_id` (to its newest descendant)."""
        return await self._db.write(
            lambda s: branches.choose_branch(s, conversation_id, owner_id, message_id),
            what="choosing a branch",
        )

    async def update_settings(
        self,
        conversation_id: str,
        owner_id: str,
        *,
        system_prompt: str | object | None = branches.UNSET,
        model: str | object | None = branches.UNSET,
    ) -> bool:
        """Set the conversation's system prompt (tokenized) and/or model (None: the
        default); False if it is not the owner's."""
        if isinstance(system_prompt, str):
            conversations.check_system_prompt(system_prompt)
        if isinstance(model, str):
            conversations.check_model(model)
        return await self._db.write(
            lambda s: branches.update_settings(
                s, conversation_id, owner_id, system_prompt=system_prompt, model=model
            ),
            what="changing a conversation's settings",
        )

    async def close_unfinished(self) -> int:
        """Mark replies a stop cut off (never finished) as ended by the server; only for a
        store this process alone uses (SQLite): elsewhere another process may be running
        them."""
        if self._db.dialect != "sqlite":
            return 0
        return await self._db.write(branches.close_unfinished, what="closing unfinished replies")

    # The frames of replies in flight, for the other processes (`reply_frames.py`).

    @property
    def target(self) -> DatabaseTarget:
        """The database this store is on (its description never holds a password)."""
        return self._db.target

    async def publish_frames(self, batches: reply_frames.Batches) -> None:
        """Store released frames (numbered, tokenized JSON) of the replies given, keyed by
        (conversation id, message id), in one transaction, and announce each reply's."""
        notify = self._db.dialect != "sqlite"
        await self._db.write(
            lambda s: reply_frames.publish(s, batches, notify=notify), what="publishing frames"
        )

    async def frames_after(self, message_id: str, seq: int) -> list[tuple[int, str]]:
        return await self._db.read(lambda s: reply_frames.after(s, message_id, seq))

    async def forget_frames(self) -> int:
        return await self._db.write(reply_frames.forget, what="forgetting old frames")

    async def notify(self, channel: str, payload: str) -> None:
        """`NOTIFY` (PostgreSQL); payloads are ids and numbers, never text of a message."""
        await self._db.write(lambda s: reply_frames.notify(s, channel, payload), what="notifying")

    async def instructions_of(self, user_id: str) -> str:
        """The user's custom instructions, unsealed ("" if none)."""
        return await self._db.read(lambda s: branches.instructions_of(s, self._key, user_id))

    async def set_instructions(self, user_id: str, text: str) -> None:
        branches.check_instructions(text)
        await self._db.write(
            lambda s: branches.set_instructions(s, self._key, user_id, text),
            what="storing instructions",
        )

    async def delete_conversation(self, conversation_id: str, owner_id: str) -> bool:
        """Delete a conversation with its messages, vault and audit trail (crypto-shredding)."""
        deleted = await self._db.write(
            lambda s: conversations.remove_conversation(s, conversation_id, owner_id),
            what="deleting a conversation",
        )
        if deleted and self._db.dialect == "sqlite":
            # Best effort: a reader still using old pages keeps part of the WAL until later.
            await self._db.autocommit("PRAGMA wal_checkpoint(TRUNCATE)")
        return deleted

    # Messages.

    async def add_message(
        self,
        conversation_id: str,
        role: str,
        text: str,
        *,
        parts: Mapping[str, str] | None = None,
        status: str = "complete",
        finish_reason: str | None = None,
        meta: Mapping[str, object] | None = None,
    ) -> Message:
        """Append a message (tokenized text) at the end of the branch shown, which it ends."""
        conversations.check_message_fields(role, status, finish_reason, parts, meta)
        return await self._db.transact(
            lambda run: turns.add(
                run,
                conversation_id,
                role,
                text,
                parts=parts or {},
                status=status,
                finish_reason=finish_reason,
                meta=meta or {},
            ),
            write=True,
            what="adding a message",
        )

    async def update_message(
        self,
        message_id: str,
        *,
        text: str | None = None,
        parts: Mapping[str, str] | None = None,
        status: str | None = None,
        finish_reason: str | None = None,
    ) -> None:
        """Change a message's text, parts (replaced whole), status or finish reason."""
        conversations.check_message_fields(None, status, finish_reason, parts, None)
        values: dict[str, object] = {}
        for name, value in (("text", text), ("status", status), ("finish_reason", finish_reason)):
            if value is not None:
                values[name] = value
        if parts is not None:
            values["parts"] = dict(parts)
        await self._db.transact(
            lambda run: turns.change(run, message_id, values),
            write=True,
            what="updating a message",
        )

    async def list_messages(self, conversation_id: str) -> list[Message]:
        """The conversation's messages in the order they were added."""

        return await self._db.transact(
            lambda run: chat_reads.history(run, conversation_id),
            write=False,
            what="reading messages",
        )

    # A chat turn: the steps the chat pipeline takes for every message, one transaction each.

    async def open_conversation(
        self, conversation_id: str, owner_id: str
    ) -> tuple[Conversation, StoredVault] | None:
        """The owned conversation and its vault (as `load_vault` gives it), or None."""
        return await self._db.transact(
            lambda run: chat_reads.open_owned(run, self._key, conversation_id, owner_id),
            write=False,
            what="opening a conversation",
        )

    async def begin_reply(
        self,
        conversation_id: str,
        user_text: str | None,
        *,
        meta: Mapping[str, object] | None = None,
        title: str | None = None,
        owner_id: str | None = None,
        masked: Mapping[str, int] | None = None,
        spellings: Mapping[int, str] | None = None,
        create_for: str | None = None,
        parent: str | None = turns.AFTER_LEAF,
        model: str | None = None,
        reply_meta: Mapping[str, object] | None = None,
    ) -> Turn:
        """Add the user's message and the reply's placeholder (status "incomplete").
        With `create_for` (an owner's id), the conversation is created first, in the same
        transaction (as `update_vault` does).

        Messages form a tree (`turns.begin`): the user message follows `parent` (default:
        the current leaf; None: a new first message) and the placeholder follows it, and
        becomes the current leaf. With `user_text` None there is no user message: the
        placeholder follows `parent` (regenerate: a user message; continue: a reply).
        `model` is recorded on the placeholder, and `reply_meta` is its meta (the system text
        the model was given, tokenized).

        Also sets the title (if given) and records the "masked" audit event (if `masked` has
        counts), as `rename_conversation` and `record_audit` would. If `owner_id` is given,
        the conversation must be that user's (else `ConversationNotFoundError`).
        `spellings` (index of a span of `meta["masked"]` -> the text the user typed there)
        are the message's own spellings of values its vault spells otherwise; they are
        sealed with the message, and `load_spellings` gives them back.
        """
        conversations.check_message_fields("user", "complete", None, None, meta)
        conversations.check_message_fields("assistant", "incomplete", None, None, reply_meta)
        if title is not None:
            conversations.check_title(title)
        if model is not None:
            conversations.check_model(model)
        counts = conversations.check_counts(masked or {})
        typed = spellings_module.check(spellings or {})
        where = self._db.target.describe()

        def work(run: Runner) -> Turn:
            if create_for is not None:
                turns.create(run, create_for, "", conversation_id)
            return turns.begin(run, conversation_id, user_text, meta or {}, title=title,
                               owner_id=owner_id, masked=counts, typed=typed, key=self._key,
                               where=where, parent=parent, model=model,
                               reply_meta=reply_meta)  # fmt: skip

        return await self._db.transact(work, write=True, what="adding a message")

    async def finish_reply(
        self,
        conversation_id: str,
        message_id: str,
        *,
        text: str,
        parts: Mapping[str, str],
        status: str,
        finish_reason: str | None,
        redacted: Mapping[str, int] | None = None,
        blocked: Mapping[str, int] | None = None,
        checkpointed: bool = True,
        reveals: Sequence[tuple[str, str, str, str]] = (),
        meta: Mapping[str, object] | None = None,
    ) -> None:
        """Store the reply as `update_message` would, with its "blocked" and "redacted" audit.

        The reply's checkpoints are deleted with it; `checkpointed=False` says it has none
        (its `ReplyCheckpoint` never `tried` to save), which spares a statement. `reveals`,
        (viewer id, token, kind, level) of each value the reply showed a viewer plain or
        masked, are recorded in the same transaction (as `record_reveals` would).
        """
        conversations.check_message_fields(None, status, finish_reason, parts, meta)
        values: dict[str, object] = {"text": text, "parts": dict(parts), "status": status}
        if finish_reason is not None:
            values["finish_reason"] = finish_reason
        if meta is not None:  # replaces the placeholder's
            values["meta"] = dict(meta)
        audits = [
            ("blocked", conversations.check_counts(blocked or {})),
            ("redacted", conversations.check_counts(redacted or {})),
        ]
        await self._db.transact(
            lambda run: turns.finish(
                run,
                conversation_id,
                message_id,
                values,
                audits,
                checkpointed=checkpointed,
                reveals=list(reveals),
            ),
            write=True,
            what="updating a message",
        )

    def reply_checkpoints(
        self, conversation_id: str, message_id: str, snapshot: checkpoints.Snapshot
    ) -> checkpoints.ReplyCheckpoint:
        """Save the reply `message_id` (a `begin_reply` placeholder) as it streams.

        `snapshot()` gives the reply's text and parts as they may be stored now (screened,
        tokenized); call `released(n)` on the result after sending n bytes of the reply's
        text, and `await close()` before `finish_reply`. Until then, a reply cut off (a crash)
        reads back from `list_messages` as far as its last checkpoint, status "incomplete".
        """
        return self._journal.open(conversation_id, message_id, snapshot)

    # The vault.

    async def assign_tokens(self, conversation_id: str, items: Sequence[VaultItem]) -> list[str]:
        """The token of each item, `<KIND_N>`, adding new values to the conversation's vault."""
        return (await self.update_vault(conversation_id, items)).tokens

    async def update_vault(
        self,
        conversation_id: str,
        items: Sequence[VaultItem],
        *,
        reserve: Iterable[str] = (),
        create_for: str | None = None,
    ) -> VaultUpdate:
        """Reserve the ids `reserve` (canonical, `EMAIL_1`), then assign tokens to `items`.
        With `create_for` (an owner's id), the conversation is created first, untitled, in
        the same transaction (its id from `new_conversation_id`), even if nothing is assigned.

        One transaction: the reservations are made first, so no item gets a reserved id,
        whoever reserved it. An id that is a token already cannot be reserved; it comes back
        in `VaultUpdate.taken` with its value. See `VaultUpdate`. A vault that would hold
        more than `max_vault_entries` rows (tokens and reserved ids) refuses the whole update
        with `VaultFullError`; nothing of it is written.
        """
        prepared = vault.prepare(self._key, items)
        ids = vault.prepare_reservations(reserve)
        if not prepared and not ids and create_for is None:
            return VaultUpdate(tokens=[], reserved=frozenset(), taken={})
        where = self._db.target.describe()

        def work(run: Runner) -> VaultUpdate:
            if create_for is not None:
                turns.create(run, create_for, "", conversation_id)
            key_check.verify_in(run, self._key, where, lock="share")
            return vault.assign(
                run, self._key, conversation_id, prepared, ids, limit=self.max_vault_entries
            )

        return await self._db.transact(work, write=True, what="assigning vault tokens")

    async def load_vault(self, conversation_id: str) -> StoredVault:
        """One conversation's vault, decrypted: its entries (token, detector kind, value and
        normalized form, as stored) and its reserved ids (see `StoredVault`)."""
        return await self._db.read(lambda s: vault.load(s, self._key, conversation_id))

    async def load_spellings(self, conversation_id: str) -> dict[str, Spellings]:
        """Message id -> its own spellings (see `begin_reply`), decrypted, for the
        conversation's messages that have any."""
        return await self._db.read(lambda s: spellings_module.load(s, self._key, conversation_id))

    # Term lists and audit.

    async def save_term_list(
        self,
        name: str,
        kind: str,
        purpose: Literal["sensitive", "forbidden"],
        terms: Sequence[str],
    ) -> None:
        """Create or replace a term list; its terms are stored sealed."""
        checked = term_lists.check_list(name, kind, purpose, terms)
        where = self._db.target.describe()

        async def work(session: AsyncSession) -> None:
            await key_check.verify(session, self._key, where, lock="share")
            await term_lists.upsert(session, self._key, name, kind, purpose, checked)

        await self._db.write(work, what="saving a term list")

    async def term_lists_version(self) -> tuple[int, str]:
        """(how many lists, when the last changed): a change to any list changes it."""
        return await self._db.read(term_lists.version)

    async def load_term_lists(self) -> list[TermList]:
        return await self._db.read(lambda s: term_lists.load_all(s, self._key))

    async def delete_term_list(self, name: str) -> bool:
        return await self._db.write(lambda s: term_lists.remove(s, name), what="deleting a list")

    # A team's own detectors (issue 22): pattern sets and people lists, stored sealed.

    async def save_team_detector(
        self, source: team_detector_rows.TeamSource, name: str, text: str
    ) -> None:
        """Create or replace a pattern set (`patterns`, TOML) or people list (`people`, CSV);
        its text is stored sealed. Its content must have passed the loaders already
        (`app.team_detectors.check_definition`): the store judges only its shape."""
        team_detector_rows.check(source, name, text)
        where = self._db.target.describe()

        async def work(session: AsyncSession) -> None:
            await key_check.verify(session, self._key, where, lock="share")
            await team_detector_rows.upsert(session, self._key, source, name, text)

        await self._db.write(work, what=f"saving a {team_detector_rows.what(source)}")

    async def load_team_detectors(
        self, source: team_detector_rows.TeamSource | None = None
    ) -> list[team_detector_rows.TeamDetector]:
        """Every stored pattern set and people list (or those of one source), opened."""
        return await self._db.read(lambda s: team_detector_rows.load_all(s, self._key, source))

    async def load_team_detector(
        self, source: team_detector_rows.TeamSource, name: str
    ) -> team_detector_rows.TeamDetector | None:
        return await self._db.read(
            lambda s: team_detector_rows.load_one(s, self._key, source, name)
        )

    async def delete_team_detector(self, source: team_detector_rows.TeamSource, name: str) -> bool:
        return await self._db.write(
            lambda s: team_detector_rows.remove(s, source, name),
            what=f"deleting a {team_detector_rows.what(source)}",
        )

    async def team_detectors_version(self) -> tuple[int, str]:
        """(how many sets and lists, when the last changed): a change to any changes it."""
        return await self._db.read(team_detector_rows.version)

    async def record_audit(
        self,
        conversation_id: str,
        message_id: str | None,
        action: Literal["masked", "redacted", "blocked"],
        counts: Mapping[str, int],
    ) -> None:
        """Record how many values of each kind were masked, redacted or blocked."""
        conversations.check_action(action)
        checked = conversations.check_counts(counts)
        await self._db.transact(
            lambda run: turns.audit(run, conversation_id, message_id, action, checked),
            write=True,
            what="recording an audit event",
        )

    async def list_audit(self, conversation_id: str) -> list[AuditEvent]:
        return await self._db.read(lambda s: conversations.audit_of(s, conversation_id))

    # A cluster: reply leases and shared rate buckets (`leases.py`), one transaction each.

    async def acquire_lease(
        self, conversation_id: str, message_id: str | None, holder: str, ttl: float
    ) -> leases.LeaseTaken:
        """Hold the conversation's lease for `ttl` seconds: ok if there was none, it had
        expired (its reply is closed in the same transaction, `expired_message_id`), or it is
        `holder`'s already (renewed, and `message_id` named if given); not ok if another
        holder's is live. `message_id` None (or "") names no reply yet."""
        leases.check_holder(holder)
        lifetime = leases.check_ttl(ttl)
        return await self._db.write(
            lambda s: leases.acquire(s, conversation_id, message_id, holder, lifetime),
            what="taking a reply lease",
        )

    async def renew_leases(
        self, holder: str, conversation_ids: Sequence[str], ttl: float
    ) -> list[str]:
        """Extend the holder's leases by `ttl` seconds from now; returns the conversation ids
        among them it no longer holds (lost: its reply must stop)."""
        leases.check_holder(holder)
        lifetime = leases.check_ttl(ttl)
        return await self._db.write(
            lambda s: leases.renew(s, holder, conversation_ids, lifetime),
            what="renewing reply leases",
        )

    async def release_lease(self, conversation_id: str, holder: str) -> None:
        """Give the lease up (nothing if `holder` does not hold it)."""
        await self._db.write(
            lambda s: leases.release(s, conversation_id, holder), what="releasing a reply lease"
        )

    async def lease_of(self, conversation_id: str) -> leases.Lease | None:
        """The conversation's lease, if a row is there (`expired` says whether it lapsed)."""
        return await self._db.read(lambda s: leases.lease_of(s, conversation_id))

    async def close_expired_leases(self, now: datetime | None = None) -> list[tuple[str, str]]:
        """Delete the leases expired at `now` (default: the database's clock) and close their
        replies if unfinished; (conversation id, message id) of each reply this call closed.
        Idempotent, and two processes running it at once close each reply once."""
        return await self._db.write(
            lambda s: leases.close_expired(s, now), what="closing expired reply leases"
        )

    async def take_rate_token(
        self, user_id: str, per_minute: int, *, now: datetime | None = None
    ) -> bool:
        """Spend one of the user's rate tokens, shared by every process on this database: a
        bucket of `per_minute` tokens refilling `per_minute / 60` a second. False: none left."""
        leases.check_rate(per_minute)
        return await self._db.write(
            lambda s: leases.take_token(s, user_id, per_minute, now), what="taking a rate token"
        )
