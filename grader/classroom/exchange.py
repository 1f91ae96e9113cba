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
name reads another learner's page, the hidden tests' verdicts with it. Here feedback/ is root's
(mode 711) and each learner has a folder of their own in it, feedback/NAME, which the hub makes
(`./course hub add`): the learner's, in the instructors' group, mode 2770. Nobody else can enter
it: not list, read, replace or delete a page there, even knowing its name. `ReleaseFeedback`
writes each page as a new file (the setgid folder gives it the instructors' group), then renames
it over the last; `FetchFeedback` and `List` look for a learner's pages there.

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
from datetime import UTC, datetime
from html import escape

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
            try:   # one page that cannot be released is one line, never the class's failure
                secret = _read_secret(os.path.join(os.path.dirname(html), "submission_secret.txt"))
                page = feedback_page(feedback_folder(self.root, self.coursedir.course_id, student), secret,
                                     notebook_id)
                _hand_over(html, page, student)
            except Exception as why:   # noqa: BLE001 - whatever it is, the others still get theirs
                self.log.error("Feedback not released for %s: %s", shown(student), _why(why))
                continue
            self.log.info("Released feedback for student '%s' on assignment '%s/%s/%s'", student,
                          self.coursedir.course_id, self.coursedir.assignment_id, notebook_id)


def _read_secret(path: str) -> str:
    """A submission's secret, as nbgrader's submit wrote it (hex); Refused when it is not that."""
    try:
        with open(path, "rb") as secret:
            text = secret.read(1024).decode("ascii").strip()
    except FileNotFoundError:
        raise Refused("the submission has no submission_secret.txt") from None
    except UnicodeDecodeError:
        raise Refused("its submission_secret.txt is not what nbgrader's submit writes") from None
    if not re.fullmatch(r"[0-9a-f]{16,256}", text):
        raise Refused("its submission_secret.txt is not what nbgrader's submit writes")
    return text


def _why(error: Exception) -> str:
    return str(error) if isinstance(error, Refused) else f"{type(error).__name__}: {shown(str(error))}"


def shown(name: str) -> str:
    """A learner's name of a file or entry as it may be printed: control characters (terminal
    escapes, carriage returns) and markup escaped."""
    return "".join(escape(c, quote=False) if c.isprintable() else repr(c)[1:-1] for c in name)


def _hand_over(html: str, page: str, student: str) -> None:
    """Write `html` as `page` in `student`'s folder, which must be theirs, in the instructors'
    group (the course folder's), mode 2770: a new file of the instructor's, mode 644 (nobody else
    can enter the folder), then renamed over an earlier page, so a learner never reads half of
    one. Nothing there is followed or opened but what this makes."""
    try:
        owner = pwd.getpwnam(student).pw_uid
    except KeyError:
        raise Refused(f"there is no account {shown(student)!r}") from None
    team = os.stat(os.path.dirname(os.path.dirname(os.path.dirname(page)))).st_gid   # the course folder's
    try:   # O_PATH: the instructor may write into the folder, not list it
        folder = os.open(os.path.dirname(page), os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as error:
        raise Refused(f"{os.path.dirname(page)} cannot be opened ({error.strerror}): ./course hub add {student} "
                      "(as root) makes it") from None
    try:
        status = os.fstat(folder)
        if status.st_uid != owner or status.st_gid != team or status.st_mode & 0o7777 != FEEDBACK_FOLDER:
            raise Refused(f"{os.path.dirname(page)} is not the learner's own folder (theirs, in the instructors' "
                          f"group, mode 2770): ./course hub add {student} (as root) makes it so")
        part = f".{os.path.basename(page)}.{secrets.token_hex(8)}"
        made = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder)
        with open(made, "wb") as out, open(html, "rb") as source:
            out.write(source.read())
            os.fchmod(out.fileno(), 0o644)
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
    """nbgrader's submit, its entry private to the learner and the instructors: nbgrader makes it
    777, so that whoever learns its name (submit prints it on the learner's screen) could copy the
    work or rename the files inside. Here the entry and its folders are 770 in the instructors'
    group, which the setgid inbound/ gives them: the instructors enter, read and may remove it,
    nobody else can enter it at all. Its files stay 644: the folders are what close them (the
    files nbgrader writes last, its time and secret, are in the learner's own group, which a
    learner cannot change to one they are not in)."""

    def set_perms(self, dest, fileperms, dirperms):
        super().set_perms(dest, fileperms=ENTRY_FILE, dirperms=ENTRY_FOLDER)

    def copy_files(self):
        super().copy_files()
        os.chmod(os.path.join(self.inbound_path, self.assignment_filename), ENTRY_FOLDER)   # nbgrader's 777 undone


ENTRY_FOLDER, ENTRY_FILE = 0o770, 0o644
FEEDBACK_FOLDER = 0o2770


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
                    self._set_aside(name, why)
        self.times = {record["filename"]: record["timestamp"] for record in records}
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
        its timestamp.txt says when the system saw the entry made (`_record`). Whatever goes wrong
        with one entry is one line, and collect goes on with the next."""
        limits = _Limits(1000 * self.coursedir.max_file_size, 1000 * self.coursedir.max_dir_size,
                         tuple(self.coursedir.ignore), tuple(self.coursedir.include))
        name = os.path.basename(src)

        def refuse(path: str, why: Refused) -> None:
            self.log.error("Not collected: %s: %s", shown(os.path.join(name, path)), why)

        try:
            student = name.split("+", 1)[0]
            folder = os.open(src, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                owner = os.fstat(folder).st_uid
                if owner != pwd.getpwnam(student).pw_uid:   # replaced since it was checked
                    raise Refused(f"it claims to be {student}'s but belongs to {_name(owner)}")
                os.makedirs(dest, exist_ok=True)
                _copy_tree(folder, dest, owner, limits, refuse)
            finally:
                os.close(folder)
            with open(os.path.join(dest, "timestamp.txt"), "w") as stamp:
                stamp.write(self.times[name].strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
        except Exception as why:   # noqa: BLE001 - one entry never stops the class's collect
            self._set_aside(name, why if isinstance(why, Refused) else Refused(_why(why)))

    def _set_aside(self, name: str, why: Refused) -> None:
        """One line for a refused entry; moved aside, out of every later collect, where the
        instructor can find and remove it (its folders are the learner's, so as root)."""
        aside = "refused-" + re.sub(r"[^A-Za-z0-9._-]", "-", name)[:200] + "-" + secrets.token_hex(4)
        try:
            os.rename(os.path.join(self.inbound_path, name), os.path.join(self.inbound_path, aside))
            where = f"; moved aside to {os.path.join(self.inbound_path, aside)} (remove it as root: rm -r ...)"
        except OSError:
            where = ""
        self.log.error("Not collected: %s: %s%s", shown(name), why, where)


MAX_DEPTH = 16          # folders in folders of one entry
MAX_PATH = 1024         # characters of a path inside an entry: its copy stays usable by every tool
MAX_ENTRIES = 10_000    # files and folders of one entry


def _record(inbound: str, name: str) -> dict:
    """An entry's record as nbgrader keeps it: its student, its name and its time, which is when
    the system last saw the entry change (its ctime, which nobody can set back), never what its
    name says; Refused when the name is not nbgrader's, or the entry is not a folder of that
    student's own."""
    parts = name.rsplit("+", 3)
    if len(parts) < 3:
        raise Refused("its name is not student+assignment+time+random")
    student = parts[0]
    try:
        parse_utc(parts[2])
    except (ValueError, OverflowError):
        raise Refused(f"its time {shown(parts[2])!r} is not a time") from None
    try:
        uid = pwd.getpwnam(student).pw_uid
    except KeyError:
        raise Refused(f"there is no account {shown(student)!r}") from None
    status = os.stat(os.path.join(inbound, name), follow_symlinks=False)
    if not stat.S_ISDIR(status.st_mode):
        raise Refused("it is not a folder")
    if status.st_uid != uid:
        raise Refused(f"it claims to be {student}'s but belongs to {_name(status.st_uid)}")
    made = datetime.fromtimestamp(status.st_ctime, UTC).replace(tzinfo=None)
    return {"username": student, "filename": name, "timestamp": made}


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"user id {uid}"


def _copy_tree(top: int, dest: str, owner: int, limits: _Limits, refuse) -> None:
    """Copy what the open folder `top` holds into the folder `dest`: folders and regular files of
    `owner`'s, each opened relative to its open folder without following a link, and made relative
    to its open destination (no path grows past the system's limit), one level at a time (no depth
    of folders exhausts the stack); `refuse(path, why)` for the rest."""
    budget, count = [limits.total_bytes], 0
    pending = [(os.dup(top), os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW), "", 0)]
    try:
        while pending:
            source, target, where, depth = pending.pop()
            try:
                for entry in sorted(os.listdir(source)):
                    path = os.path.join(where, entry)
                    if any(fnmatch.fnmatch(entry, glob) for glob in limits.ignore):
                        continue
                    count += 1
                    if count > MAX_ENTRIES:
                        raise Refused(f"more than {MAX_ENTRIES} files and folders: the rest is not collected")
                    try:
                        if len(path) > MAX_PATH:
                            raise Refused(f"its path is longer than {MAX_PATH} characters")
                        folder = _copy_entry(source, target, entry, owner, limits, budget)
                        if folder is not None:
                            if depth + 1 >= MAX_DEPTH:
                                os.close(folder[0]), os.close(folder[1])
                                raise Refused(f"folders nested deeper than {MAX_DEPTH}")
                            pending.append((*folder, path, depth + 1))
                    except Refused as why:
                        refuse(path, why)
            finally:
                os.close(source)
                os.close(target)
    except Refused as why:
        refuse("", why)
    finally:
        for source, target, *_ in pending:
            os.close(source)
            os.close(target)


def _copy_entry(folder: int, target: int, entry: str, owner: int, limits: _Limits,
                budget: list[int]) -> tuple[int, int] | None:
    """Copy one entry of the open `folder` into the open `target`; for a folder, its copy is made
    and both are returned open, to be walked."""
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
            os.mkdir(entry, dir_fd=target)
            walk = (opened, os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=target))
            opened = -1   # left open, for the caller to walk
            return walk
        if not stat.S_ISREG(status.st_mode):
            raise Refused("not a regular file")
        if not any(fnmatch.fnmatch(entry, glob) for glob in limits.include):
            return None
        limit = min(limits.file_bytes, budget[0])
        if status.st_size > limit:   # known before a byte is read (a sparse file costs nothing to make)
            raise Refused(_too_large(limit))
        data = _read(opened, limit)
        budget[0] -= len(data)
        made = os.open(entry, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=target)
        with open(made, "wb") as out:
            out.write(data)
        return None
    finally:
        if opened >= 0:
            os.close(opened)


def _too_large(limit: int) -> str:
    return f"larger than the limit of {limit} bytes (nbgrader's CourseDirectory.max_file_size and max_dir_size)"


def _read(opened: int, limit: int) -> bytes:
    """The file's bytes; Refused if there are more than `limit`."""
    chunks, size = [], 0
    while chunk := os.read(opened, 1 << 20):
        size += len(chunk)
        if size > limit:
            raise Refused(_too_large(limit))
        chunks.append(chunk)
    return b"".join(chunks)


# The names of ExchangeFactory's settings, and the class each takes.
FACTORY = {"fetch_assignment": FetchAssignment, "fetch_feedback": FetchFeedback,
           "release_assignment": ReleaseAssignment, "release_feedback": ReleaseFeedback,
           "list": List, "submit": Submit, "collect": Collect}
