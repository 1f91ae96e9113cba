"""nbgrader's exchange for a class on one machine: a root that nobody but root may change, and a
collect that trusts nothing in inbound/.

nbgrader's default exchange asks for a root that every account may write (mode 777): a learner
could then rename the course's folder and hide every release and submission from the class,
or make the course's folder before the instructor does and own it. On the class hub
(grader/classroom/hub.py) the root belongs to root, mode 755, and the course's folder in it is made by
the hub and given to the instructor. These classes are nbgrader's own, with one change: before
each action they ask only that the root can be entered, not written (nbgrader's `ensure_root`).
Below the root, outbound/, inbound/ with its hidden submissions and feedback/ are nbgrader's.

Every learner may write into inbound/, and the instructor collects from it as themselves. So
`Collect` takes only what the learner named by an entry actually made:
- an entry whose name is not student+assignment+timestamp+random is skipped with one line (nbgrader
  stops the whole collect on it);
- the entry, and everything in it, must belong to the account of the student it names (nbgrader
  only warns, then collects it as that student's);
- only folders and regular files are copied, opened without following a link (`O_NOFOLLOW`, one
  folder at a time), and read no further than nbgrader's size limits: a link to the instructor's
  solutions or to /dev/urandom is skipped with one line, never read as the instructor.
Every refusal is one line of collect's log, and collect goes on for everyone else.
hub/learner/nbgrader_config.py names these classes for every server of the hub.
"""
from __future__ import annotations

import fnmatch
import os
import pwd
import stat
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.exchange import default
from nbgrader.exchange.default.collect import groupby
from nbgrader.utils import parse_utc


class _EnterableRoot:
    """nbgrader's check of the exchange's root, asking for x instead of wx."""

    root: str

    def ensure_root(self) -> None:
        if not (os.path.isdir(self.root) and os.access(self.root, os.X_OK)):
            self.fail(f"The class's exchange {self.root} is missing or closed to you: please contact your instructor")


class FetchAssignment(_EnterableRoot, default.ExchangeFetchAssignment):
    pass


class FetchFeedback(_EnterableRoot, default.ExchangeFetchFeedback):
    pass


class ReleaseAssignment(_EnterableRoot, default.ExchangeReleaseAssignment):
    pass


class ReleaseFeedback(_EnterableRoot, default.ExchangeReleaseFeedback):
    pass


class List(_EnterableRoot, default.ExchangeList):
    pass


class Submit(_EnterableRoot, default.ExchangeSubmit):
    pass


class Refused(Exception):
    """Why an entry of inbound/, or a file in it, is not collected."""


@dataclass(frozen=True)
class _Limits:
    file_bytes: int
    total_bytes: int
    ignore: tuple[str, ...]     # nbgrader's CourseDirectory.ignore and .include globs
    include: tuple[str, ...]


class Collect(_EnterableRoot, default.ExchangeCollect):
    """nbgrader's collect, taking from inbound/ only what each learner made (see the module)."""

    def init_src(self):
        """nbgrader's choice of each student's submission, among the entries that pass `_record`
        (nbgrader's own init_src stops at the first name it cannot read)."""
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        if not os.access(self.inbound_path, os.R_OK | os.X_OK):
            self.fail(f"You don't have read permissions for the directory: {self.inbound_path}")
        pattern = f"{self.coursedir.student_id or '*'}+{self.coursedir.assignment_id}+*"
        records = []
        for name in sorted(os.listdir(self.inbound_path)):
            if fnmatch.fnmatchcase(name, pattern):
                try:
                    records.append(_record(self.inbound_path, name))
                except Refused as why:
                    self.log.error("Not collected: %s: %s", name, why)
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gradebook:
            try:
                self.duedate = gradebook.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                self.duedate = None
        self.src_records = []
        for submissions in groupby(records, lambda record: record["username"]).values():
            newest_first = self._sort_by_timestamp(submissions)
            if self.duedate is not None and self.before_duedate:   # the last one in time, if any
                newest_first = [r for r in newest_first if r["timestamp"] <= self.duedate] or newest_first
            self.src_records.append(newest_first[0])

    def do_copy(self, src, dest, log=None):
        """The entry's folders and regular files, never through a link, within nbgrader's limits;
        its timestamp.txt says the time its name gives (nbgrader stops a later collect on one it
        cannot read)."""
        limits = _Limits(1000 * self.coursedir.max_file_size, 1000 * self.coursedir.max_dir_size,
                         tuple(self.coursedir.ignore), tuple(self.coursedir.include))
        name = os.path.basename(src)
        student, _, stamp = name.rsplit("+", 3)[:3]

        def refuse(path: str, why: Refused) -> None:
            self.log.error("Not collected: %s: %s", os.path.join(name, path), why)

        folder = os.open(src, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            owner = os.fstat(folder).st_uid
            if owner != pwd.getpwnam(student).pw_uid:   # replaced since it was checked
                return refuse("", Refused(f"it claims to be {student}'s but belongs to {_name(owner)}"))
            _copy_folder(folder, Path(dest), owner, limits, [limits.total_bytes], refuse)
            (Path(dest) / "timestamp.txt").write_text(stamp)
        finally:
            os.close(folder)


def _record(inbound: str, name: str) -> dict:
    """An entry's record as nbgrader keeps it: its student, its name and its time; Refused when
    the name is not nbgrader's, or the entry is not a folder of that student's own."""
    parts = name.rsplit("+", 3)
    if len(parts) < 3:
        raise Refused("its name is not student+assignment+time+random")
    student = parts[0]
    try:
        timestamp: datetime = parse_utc(parts[2])
    except (ValueError, OverflowError):
        raise Refused(f"its time {parts[2]!r} is not a time") from None
    try:
        uid = pwd.getpwnam(student).pw_uid
    except KeyError:
        raise Refused(f"there is no account {student!r}") from None
    status = os.stat(os.path.join(inbound, name), follow_symlinks=False)
    if not stat.S_ISDIR(status.st_mode):
        raise Refused("it is not a folder")
    if status.st_uid != uid:
        raise Refused(f"it claims to be {student}'s but belongs to {_name(status.st_uid)}")
    return {"username": student, "filename": name, "timestamp": timestamp}


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"user id {uid}"


def _copy_folder(folder: int, dest: Path, owner: int, limits: _Limits, budget: list[int], refuse, where: str = ""):
    """Copy what the open folder holds into `dest`: folders and regular files of `owner`'s, each
    opened relative to its folder without following a link; `refuse(path, why)` for the rest."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in sorted(os.listdir(folder)):
        path = os.path.join(where, entry)
        if any(fnmatch.fnmatch(entry, glob) for glob in limits.ignore):
            continue
        try:
            _copy_entry(folder, entry, dest / entry, owner, limits, budget, refuse, path)
        except Refused as why:
            refuse(path, why)


def _copy_entry(folder: int, entry: str, dest: Path, owner: int, limits: _Limits, budget: list[int], refuse,
                path: str) -> None:
    kind = os.stat(entry, dir_fd=folder, follow_symlinks=False).st_mode
    if stat.S_ISLNK(kind):
        raise Refused("a symbolic link (only files and folders are collected)")
    if not (stat.S_ISDIR(kind) or stat.S_ISREG(kind)):
        raise Refused("not a regular file")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_DIRECTORY if stat.S_ISDIR(kind) else 0)
    try:
        opened = os.open(entry, flags, dir_fd=folder)
    except OSError as error:   # changed since, e.g. into a link (ELOOP)
        raise Refused(f"could not be opened ({error.strerror})") from None
    try:
        status = os.fstat(opened)   # what was opened, not what the name showed before
        if status.st_uid != owner:
            raise Refused(f"it belongs to {_name(status.st_uid)}, not to the submission's owner")
        if stat.S_ISDIR(status.st_mode):
            _copy_folder(opened, dest, owner, limits, budget, refuse, path)
        elif stat.S_ISREG(status.st_mode):
            if not any(fnmatch.fnmatch(entry, glob) for glob in limits.include):
                return
            data = _read(opened, min(limits.file_bytes, budget[0]))
            budget[0] -= len(data)
            dest.write_bytes(data)
        else:
            raise Refused("not a regular file")
    finally:
        os.close(opened)


def _read(opened: int, limit: int) -> bytes:
    """The file's bytes; Refused if there are more than `limit`."""
    chunks, size = [], 0
    while chunk := os.read(opened, 1 << 20):
        size += len(chunk)
        if size > limit:
            raise Refused(f"larger than the limit of {limit} bytes (nbgrader's CourseDirectory.max_file_size "
                          "and max_dir_size)")
        chunks.append(chunk)
    return b"".join(chunks)


# The names of ExchangeFactory's settings, and the class each takes.
FACTORY = {"fetch_assignment": FetchAssignment, "fetch_feedback": FetchFeedback,
           "release_assignment": ReleaseAssignment, "release_feedback": ReleaseFeedback,
           "list": List, "submit": Submit, "collect": Collect}
