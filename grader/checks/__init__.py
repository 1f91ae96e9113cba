"""The learner's runtime: what a notebook's self-checks and hidden tests run in the learner's own
kernel. The check language (`spec`), the judges that compare values (`compare`), the format values
cross a process boundary in (`wire`), the inputs checks share (`inputs`), the learner's language
(`i18n`), their progress record (`progress`), and unit 10's GPT-2: its download and stand-ins of
its format (`gpt2`). It imports nothing of grading, authoring or the
class (see .importlinter): it is what the learner's wheel carries."""
