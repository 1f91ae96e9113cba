"""Work on a unit's translation as JSON, for those who would rather not edit a .po file, and check it.

    python tools/translations.py to-json zh 01_dot_product unit01.json   # the entries, to fill in
    python tools/translations.py from-json zh 01_dot_product unit01.json # write them back to the .po
    python tools/translations.py check zh 01_dot_product                 # what is left to do

The JSON holds one object per entry: "english" (the msgid, do not edit), "kind", "where", and
"translation" to fill in. An entry whose English changed since it was translated is "fuzzy",
with the English it translated as "previous": update the translation, then remove "fuzzy". An
entry to translate whose English changed too much to be fuzzy has the closest old translation
beside it ("previous", "previous_translation"): edit it into "translation".
`python -m grader release` then makes the notebooks of that language.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.authoring import source, translation  # noqa: E402


def to_json(language: str, unit: str, path: Path) -> None:
    po, _ = translation.update(language, unit, source.unit_notebook(unit))
    entries = []
    for e in (e for e in po if not e.obsolete):
        entry = {"where": e.occurrences[0][1], "kind": e.comment, "english": e.msgid, "translation": e.msgstr}
        if "fuzzy" in e.flags:
            entry |= {"fuzzy": True, "previous": e.previous_msgid}
        elif not e.msgstr and (old := translation.closest_obsolete(po, e.msgid)) is not None:
            entry |= {"previous": old.msgid, "previous_translation": old.msgstr}   # to edit, not start over
        entries.append(entry)
    path.write_text(json.dumps(entries, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{len(entries)} entries, {sum(not e['translation'] for e in entries)} to translate -> {path}")


def from_json(language: str, unit: str, path: Path) -> None:
    given = {e["english"]: e for e in json.loads(path.read_text(encoding="utf-8"))}
    po, _ = translation.update(language, unit, source.unit_notebook(unit), write=False)
    for entry in po:
        if entry.msgid in given:
            entry.msgstr = given[entry.msgid].get("translation") or ""
            if not given[entry.msgid].get("fuzzy") and "fuzzy" in entry.flags:
                entry.flags.remove("fuzzy")
                entry.previous_msgid = None
    unknown = set(given) - {e.msgid for e in po}
    translation.catalogue_path(language, unit).write_text(str(po), encoding="utf-8")
    print(f"wrote {translation.catalogue_path(language, unit)}"
          + (f"; {len(unknown)} entries of the JSON are no longer in the English source" if unknown else ""))


def check(language: str, unit: str) -> int:
    source_nb = source.unit_notebook(unit)
    po, _ = translation.update(language, unit, source_nb, write=False)
    problems = translation.catalogue_problems(po, language, unit)
    problems += translation.code_problems(translation.translate(source_nb, translation.table(po)), language, unit)
    for problem in problems:
        print(problem)
    print(f"{unit}: {len(po)} entries, {len(problems)} problems")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["to-json", "from-json", "check"])
    parser.add_argument("language", choices=translation.LANGUAGES)
    parser.add_argument("unit")
    parser.add_argument("json", nargs="?", type=Path)
    args = parser.parse_args()
    if args.command == "check":
        return check(args.language, args.unit)
    if args.json is None:
        parser.error(f"{args.command} needs a JSON file")
    (to_json if args.command == "to-json" else from_json)(args.language, args.unit, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
