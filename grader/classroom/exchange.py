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

Feedback belongs to its learner. nbgrader puts every learner's feedback page in one folder,
feedback/, named by a hash of the submission's secret and readable by all: whoever learns a
name (the secret lies world-readable in the submission) reads another learner's page, the
hidden tests' verdicts with it. Here feedback/ is root's (mode 711) and each learner has a
folder of their own in it, feedback/NAME, which the hub makes (`./course hub add`): root's, its
group the learner's own, mode 2753. A learner lists and reads their own; any instructor may put
a page in it, which `ReleaseFeedback` writes as a new file readable by its owner and that group
alone (mode 640: the setgid folder gives it the learner's group); nobody else can list, watch
or read anything there, even knowing a name. `FetchFeedback` and `List` look for a learner's
pages there.

hub/learner/nbgrader_config.py names these classes for every server of the hub.
"""
from __future__ import annotations

import fnmatch
import glob
import os
import pwd
import re
import secrets
import stat
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.exchange import default
from nbgrader.exchange.default.collect import groupby
from nbgrader.utils import get_username, notebook_hash, parse_utc


class _EnterableRoot:
    """nbgrader's check of the exchange's root, asking for x instead of wx."""

    root: str

    def ensure_root(self) -> None:
        if not (os.path.isdir(self.root) and os.access(self.root, os.X_OK)):
            self.fail(f"The class's exchange {self.root} is missing or closed to you: please contact your instructor")

    def course_path_or_fail(self) -> str:
        """The course's folder in the exchange; nbgrader's failure when no course id is set."""
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        return os.path.join(self.root, self.coursedir.course_id)


class FetchAssignment(_EnterableRoot, default.ExchangeFetchAssignment):
    pass


def feedback_folder(root: str, course_id: str, student: str) -> str:
    """A learner's own folder of feedback pages in the exchange (see the module)."""
    return os.path.join(root, course_id, "feedback", student)


def feedback_page(folder: str, secret: str, notebook_id: str) -> str:
    """The page of one notebook of a submission, named as nbgrader names it."""
    return os.path.join(folder, f"{notebook_hash(secret=secret, notebook_id=notebook_id)}.html")


def _secret(submission: str) -> str | None:
    """The secret nbgrader's submit left in the learner's cached copy of a submission."""
    try:
        with open(os.path.join(submission, "submission_secret.txt")) as secret:
            return secret.read()
    except OSError:
        return None


class FetchFeedback(_EnterableRoot, default.ExchangeFetchFeedback):
    """nbgrader's fetch of feedback, from the learner's own folder (nbgrader's secret-named pages;
    the names of nbgrader before 0.7 are never released here)."""

    def init_src(self):
        self.course_path = self.course_path_or_fail()
        me = get_username() if self.coursedir.student_id == "*" else self.coursedir.student_id
        self.src_path = feedback_folder(self.root, self.coursedir.course_id, me)
        self.cache_path = os.path.join(self.cache, self.coursedir.course_id)
        if not os.path.isdir(self.src_path):
            self.fail(f"This course has no feedback folder for you ({self.src_path} is missing or closed to you): "
                      "please contact your instructor")
        pattern = os.path.join(self.cache_path, f"*+{self.coursedir.assignment_id or '*'}+*")
        self.feedback_files = []
        for submission in sorted(glob.glob(pattern)):
            _, assignment_id, timestamp = os.path.basename(submission).split("+")
            secret = _secret(submission)
            for notebook in sorted(glob.glob(os.path.join(submission, "*.ipynb"))):
                notebook_id = os.path.splitext(os.path.basename(notebook))[0]
                page = feedback_page(self.src_path, secret, notebook_id) if secret else None
                if page and os.path.isfile(page):
                    self.feedback_files.append((notebook_id, timestamp, page))
                    self.log.info("Found feedback for '%s/%s/%s' submitted at %s", self.coursedir.course_id,
                                  assignment_id, notebook_id, timestamp)
                else:
                    self.log.warning("Could not find feedback for '%s/%s/%s' submitted at %s",
                                     self.coursedir.course_id, assignment_id, notebook_id, timestamp)


class ReleaseAssignment(_EnterableRoot, default.ExchangeReleaseAssignment):
    pass


class ReleaseFeedback(_EnterableRoot, default.ExchangeReleaseFeedback):
    """nbgrader's release of feedback, each page into its learner's own folder, readable by them
    alone; a learner without a folder is said in one line, and the others get theirs."""

    def init_dest(self):
        self.course_path = self.course_path_or_fail()
        self.dest_path = os.path.join(self.course_path, "feedback")
        if not os.path.isdir(self.dest_path):
            self.fail(f"{self.dest_path} is missing: the class's hub makes it (./course hub add, as root)")

    def copy_files(self):
        excluded = set(filter(None, (self.coursedir.student_id_exclude or "").split(",")))
        place = re.compile(re.escape(os.path.sep).join([
            self.coursedir.format_path(self.coursedir.feedback_directory, "(?P<student_id>.*)",
                                       self.coursedir.assignment_id, escape=True),
            "(?P<notebook_id>.*).html"]))
        for html in sorted(glob.glob(os.path.join(self.src_path, "*.html"))):
            found = place.match(html)
            if found is None or found["student_id"] in excluded:
                continue
            student, notebook_id = found["student_id"], found["notebook_id"]
            graded = os.path.dirname(html)
            with open(os.path.join(graded, "submission_secret.txt")) as secret:
                page = feedback_page(feedback_folder(self.root, self.coursedir.course_id, student), secret.read(),
                                     notebook_id)
            try:
                _hand_over(html, page, student)
            except Refused as why:
                self.log.error("Feedback not released for %s: %s", student, why)
                continue
            self.log.info("Released feedback for student '%s' on assignment '%s/%s/%s'", student,
                          self.coursedir.course_id, self.coursedir.assignment_id, notebook_id)


def _hand_over(html: str, page: str, student: str) -> None:
    """Write `html` as `page` in `student`'s folder: a new file of the instructor's, mode 640, in
    the folder's group, which must be the learner's own; then renamed over an earlier page, so a
    learner never reads half of one. Nothing there is followed or opened but what this makes."""
    try:
        group = pwd.getpwnam(student).pw_gid
    except KeyError:
        raise Refused(f"there is no account {student!r}") from None
    try:   # O_PATH: the instructor may write into the folder, not list it
        folder = os.open(os.path.dirname(page), os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as error:
        raise Refused(f"{os.path.dirname(page)} cannot be opened ({error.strerror}): ./course hub add {student} "
                      "(as root) makes it") from None
    try:
        status = os.fstat(folder)
        if status.st_uid != 0 or status.st_gid != group or status.st_mode & 0o7777 != 0o2753:
            raise Refused(f"{os.path.dirname(page)} is not the learner's own folder (root's, in their group, "
                          f"mode 2753): ./course hub add {student} (as root) makes it so")
        part = f".{os.path.basename(page)}.{secrets.token_hex(8)}"
        made = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder)
        with open(made, "wb") as out, open(html, "rb") as source:
            out.write(source.read())
            os.fchmod(out.fileno(), 0o640)
        os.replace(part, os.path.basename(page), src_dir_fd=folder, dst_dir_fd=folder)
    finally:
        os.close(folder)


class List(_EnterableRoot, default.ExchangeList):
    """nbgrader's list, with a learner's submitted assignments' feedback looked for in their own folder."""

    def parse_assignments(self):
        assignments = super().parse_assignments()
        if not (self.inbound or self.cached):
            return assignments
        for assignment in assignments:
            for info in assignment["submissions"]:
                if info["status"] != "submitted":
                    continue
                secret = _secret(info["path"])
                folder = feedback_folder(self.root, info["course_id"], info["student_id"])
                for notebook in info["notebooks"]:
                    page = feedback_page(folder, secret, notebook["notebook_id"]) if secret else None
                    notebook["has_exchange_feedback"] = bool(page) and os.path.isfile(page)
                    notebook["feedback_updated"] = notebook["has_local_feedback"] and \
                        notebook["has_exchange_feedback"] and not _same(page, notebook["local_feedback_path"])
                if info["notebooks"]:
                    info["has_exchange_feedback"] = all(nb["has_exchange_feedback"] for nb in info["notebooks"])
                    info["feedback_updated"] = any(nb["feedback_updated"] for nb in info["notebooks"])
        return assignments


def _same(one: str, other: str) -> bool:
    with open(one, "rb") as a, open(other, "rb") as b:
        return a.read() == b.read()


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
        self.course_path = self.course_path_or_fail()
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
