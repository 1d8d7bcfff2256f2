"""Training prompts for the embedded drafters: speclens's own instruction templates
filled from Faker's English word, job and place lists (PyPI `faker`, MIT).

The target answers them itself (self-distillation), so the drafters learn the
target's own continuations. Nothing here comes from an evaluation set: the
templates are written for speclens, and `tests/unit/test_drafter_corpus.py`
fails if any prompt speclens evaluates on appears in them.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

__all__ = ["CORPUS", "TrainingPrompt", "shared_passages", "training_prompts", "words"]

# Named in speclens_drafter.json and the README.
CORPUS = {
    "name": "speclens-selfdistill-v1",
    "prompts": "speclens instruction templates x Faker en_US word/job/place lists",
    "source": "PyPI faker==40.63.0 (MIT); templates in drafters/training/corpus.py",
    "responses": "the target's own greedy answers",
    "license": "MIT (faker); the templates are speclens's own",
}

# Our own lists, for prompts Faker's vocabulary cannot make.
_CONCEPTS = (
    "photosynthesis",
    "entropy",
    "inflation",
    "supply and demand",
    "natural selection",
    "plate tectonics",
    "the water cycle",
    "compound interest",
    "machine learning",
    "blockchain",
    "vaccination",
    "gravity",
    "electric circuits",
    "the immune system",
    "climate change",
    "recursion",
    "hash tables",
    "encryption",
    "the Renaissance",
    "democracy",
    "opportunity cost",
    "black holes",
    "DNA replication",
    "renewable energy",
    "the scientific method",
    "probability",
    "sorting algorithms",
    "operating systems",
    "the stock market",
    "nutrition",
    "sleep",
    "urban planning",
    "volcanoes",
    "ocean currents",
    "antibiotics",
    "the printing press",
)
_FORMS = (
    "poem",
    "short story",
    "blog post",
    "persuasive essay",
    "limerick",
    "diary entry",
    "news article",
    "product review",
    "cover letter",
    "motivational speech",
    "fable",
    "song chorus",
    "travel guide entry",
)
_TONES = ("formal", "casual", "humorous", "poetic", "concise", "enthusiastic", "skeptical")
_LANGS = ("Python", "JavaScript", "Java", "C++", "Go", "Rust", "SQL", "Bash")
_CODE_TASKS = (
    "return the {n} most common words in a text",
    "check whether two strings are anagrams",
    "merge two sorted lists into one sorted list",
    "compute the factorial of n iteratively",
    "remove duplicate values from a list while keeping their order",
    "count the vowels in a string",
    "find the second largest number in a list",
    "convert a temperature from Celsius to Fahrenheit",
    "validate that a string looks like an email address",
    "flatten a nested list",
    "return the running total of a list of numbers",
    "group a list of {w}s by their first letter",
    "compute the greatest common divisor of two integers",
    "transpose a matrix given as a list of lists",
    "split a list into chunks of size {n}",
    "return the longest word in a sentence",
    "check whether a number is prime",
    "reverse the order of words in a sentence",
    "count how many times each character appears in a string",
    "rotate a list by {m} positions",
)

# {w}, {w2}: common English words; {job}; {place}, {place2}: cities; {country}; {name}; {company};
# {n}, {m}: small integers; {concept}; {form}; {tone}; {lang}; {task}; {fn}: a function name;
# {sentence}: a Faker sentence.
_TEMPLATES: dict[str, tuple[str, ...]] = {
    "writing": (
        "Write a short poem about {w} and {w2}.",
        "Write a two-paragraph story in which a {job} finds a {w} in {place}.",
        "Draft a friendly email to a colleague named {name} about the {w} project.",
        "Write a blog post introduction about why {w} matters to people in {place}.",
        "Write a {form} about {concept}.",
        "Write a {tone} {form} about a {job} from {country}.",
        "Write a product description for a {w2} designed for a {job}.",
        "Write a short speech a {job} could give at a {w} festival.",
        "Describe a rainy morning in {place} in vivid detail.",
        "Write a letter from {name} to an old friend, mentioning {w} and {w2}.",
        "Write the opening scene of a mystery novel set in {place}.",
        'Rewrite this sentence in a {tone} tone: "{sentence}"',
        "Compose a travel blog post about a {n}-day trip to {country}, with must-see places.",
        "Write an engaging social media post announcing that {company} has opened an office in {place}.",
        'Edit this paragraph to make it clearer and more {tone}: "{sentence} {sentence2}"',
    ),
    "roleplay": (
        "Pretend you are a {job}. Explain your typical day to a curious child.",
        "You are a tour guide in {place}. Welcome a group of visitors and describe the sights.",
        "Act as a {job} giving advice to someone who is nervous about {w}.",
        "Imagine you are {name}, a {job} who just won an award. Give a short acceptance speech.",
        "Play the role of a wise old {job} and answer: what is the secret to {w}?",
        "You are a customer service agent at {company}. A customer complains about a broken {w2}. Respond politely.",
        "Take on the persona of a pirate captain and tell your crew about the {w} you found.",
        "Role-play a job interview: you are interviewing a candidate for a {job} position. Ask your first three questions.",
        "Embody a famous detective and explain how you solved the case of the missing {w}.",
        "You are a medieval knight visiting modern {place}. Describe what you see, staying in character.",
        "Act as my personal fitness coach. I want to get better at {w}. What should I do this week?",
        "Pretend to be a time traveler from the year {n}0{m}0 describing daily life to people today.",
        "You are the mayor of {place}. Answer a reporter's question about {concept}.",
    ),
    "reasoning": (
        "{name} has {n} apples and gives away {m}. Then {name} buys twice as many as are left. How many apples now? Explain step by step.",
        "If every {w} is a {w2}, and some {w2}s are red, can we conclude that some {w}s are red? Explain.",
        "A train leaves {place} at {n} o'clock and travels for {m} hours. At what time does it arrive? Show your reasoning.",
        "List three possible explanations for why a {job} might be late to work, and how to tell them apart.",
        "What are the pros and cons of moving to {place}? Reason through both sides.",
        "{name} is taller than {name2}, and {name2} is taller than {name3}. Who is the shortest? Explain.",
        "There are {n} people in a room and each shakes hands with every other person once. How many handshakes are there?",
        "Is it a good idea for {company} to open a store in {place}? Think through the main factors.",
        "A farmer has chickens and cows, {n}{m} heads and {n}{m}{n} legs in total. Is that possible? Work it out.",
    ),
    "math": (
        "What is {n} multiplied by {m}? Show the working.",
        "Solve for x: {n}x + {m} = {n}{m}. Explain each step.",
        "A rectangle is {n} cm wide and {m} cm long. What are its area and perimeter?",
        "What is the sum of the integers from 1 to {n}? Explain the formula you use.",
        "Convert {n}{m} minutes into hours and minutes.",
        "If a shirt costs {n}{m} dollars and is discounted by {n} percent, what is the new price?",
        "A bag has {n} red and {m} blue marbles. What is the probability of drawing two red marbles without replacement?",
        "Find the derivative of f(x) = {n}x^3 - {m}x + {n}.",
        "The average of {n} numbers is {m}{n}. One number is removed and the average becomes {m}{m}. What was removed?",
        "How much is {n}{m}00 dollars after {m} years at {n} percent interest compounded yearly?",
    ),
    "coding": (
        "Write a {lang} function that {task}.",
        "Write a Python class named {W} with methods to add, remove and list items.",
        "Explain what a Python dictionary is, with an example that maps {w} to {w2}.",
        "Write a SQL query that finds the {n} most recent orders from customers in {place}.",
        "Write a Python script that reads a CSV file of {w}s and prints the average of one column.",
        'Complete this Python function:\n\n```python\ndef {fn}(items):\n    """{Task}."""\n```',
        'def {fn}(values: list) -> list:\n    """{Task}.\n    >>> {fn}([{n}, {m}, {n}])\n    """\n',
        "Find the bug in this code and fix it:\n\n```python\ndef {fn}(xs):\n    total = 0\n    for i in range(len(xs) + 1):\n        total += xs[i]\n    return total\n```",
        "Explain the time complexity of a function that {task}.",
        "Write unit tests in Python for a function that {task}.",
    ),
    "extraction": (
        "Extract the names, jobs and cities from this text: {name} works as a {job} in {place}, and their friend {name2} lives in {place2}.",
        "From the sentence '{name} bought {n} {w}s and {m} {w2}s', list each item with its quantity as JSON.",
        "Identify the main topic of this phrase and give three keywords: '{catch}'.",
        "Read this note and list every date and amount: On {date}, {company} paid {n}{m}0 dollars to {name}; on {date2} it received {m}{n}0 dollars.",
        "Summarize this text in one sentence: {sentence} {sentence2} {sentence3}",
        "Return a JSON object with the fields name, company and city for: {name} from {company}, based in {place}.",
    ),
    "stem": (
        "Explain {concept} in simple terms.",
        "What does a {job} need to know about statistics? Give examples.",
        "Explain {concept} as if to a {job} with no background in it.",
        "Describe how a computer stores the word '{w}' in memory.",
        "Why is the sky blue? Answer for a student in {place}.",
        "Explain the difference between weather and climate, with an example from {country}.",
        "What are the main open questions about {concept} today?",
        "Compare {concept} and {concept2}: how are they related?",
    ),
    "humanities": (
        "Discuss how the idea of {w} has changed over the last century.",
        "What role does {w} play in modern culture? Give two examples.",
        "Describe the history and culture of {country} in a few paragraphs.",
        "Compare the values of a {job} with those of an artist.",
        "What makes a good leader? Answer with reference to {w}.",
        "How did {concept} change the way people live? Discuss its social effects.",
        "Give an ethical argument for and against {concept}.",
    ),
    "chat": (
        "Can you give me some tips for getting better at {w}?",
        "I'm planning a trip to {country}. What should I pack?",
        "What's a good way to explain {concept} to a friend?",
        "How do I become a {job}?",
        "Suggest five names for a {color} {w2}.",
        "Summarize in three bullet points what a {job} does.",
        "Give me a short workout plan I can do at home in {n} minutes.",
        "My friend {name} is sad about losing a {w}. What could I say to help?",
        "Recommend three books or films about {concept}, with a sentence on each.",
    ),
}


@dataclass(frozen=True)
class TrainingPrompt:
    domain: str
    text: str


def _fill(template: str, fake, rng: random.Random) -> str:
    w, w2 = fake.word(), fake.word()
    task = rng.choice(_CODE_TASKS).format(w=w, n=rng.randint(2, 5), m=rng.randint(1, 4))
    values = {
        "w": w,
        "w2": w2,
        "W": w.capitalize() + w2.capitalize(),
        "job": fake.job().lower(),
        "place": fake.city(),
        "place2": fake.city(),
        "country": fake.country(),
        "company": fake.company(),
        "name": fake.first_name(),
        "name2": fake.first_name(),
        "name3": fake.first_name(),
        "n": rng.randint(2, 12),
        "m": rng.randint(2, 9),
        "color": fake.color_name().lower(),
        "catch": fake.catch_phrase(),
        "concept": rng.choice(_CONCEPTS),
        "concept2": rng.choice(_CONCEPTS),
        "form": rng.choice(_FORMS),
        "tone": rng.choice(_TONES),
        "lang": rng.choice(_LANGS),
        "task": task,
        "Task": task[0].upper() + task[1:],
        "fn": f"{w}_{w2}".replace("-", "_"),
        "sentence": fake.sentence(nb_words=12),
        "sentence2": fake.sentence(nb_words=10),
        "sentence3": fake.sentence(nb_words=14),
        "date": fake.date(),
        "date2": fake.date(),
    }
    return template.format(**values)


def training_prompts(count: int, seed: int = 0) -> list[TrainingPrompt]:
    """``count`` distinct prompts, domains in turn, the same list for the same (count, seed)."""
    from faker import Faker  # the drafters extra; loaded only when a drafter is built

    fake = Faker("en_US")
    fake.seed_instance(seed)
    rng = random.Random(seed)
    domains = sorted(_TEMPLATES)
    seen: set[str] = set()
    prompts: list[TrainingPrompt] = []
    attempts = 0
    while len(prompts) < count:
        attempts += 1
        if attempts > 50 * count:
            raise RuntimeError(f"could only make {len(prompts)} distinct training prompts of {count}")
        domain = domains[len(prompts) % len(domains)]
        text = _fill(rng.choice(_TEMPLATES[domain]), fake, rng)
        if text not in seen:
            seen.add(text)
            prompts.append(TrainingPrompt(domain, text))
    return prompts


def words(text: str) -> list[str]:
    """The words texts are compared by: runs of lower-cased letters and digits."""
    return re.findall(r"[a-z0-9]+", text.lower())


def shared_passages(training: list[str], evaluation: list[str], n: int = 8) -> list[str]:
    """Evaluation texts that appear in the training texts: whole (short ones) or by a run of ``n``
    words in common. Empty when the two are disjoint."""
    grams: set[tuple[str, ...]] = set()
    joined = " " + " ".join(" ".join(words(t)) for t in training) + " "
    for text in training:
        found_words = words(text)
        grams.update(tuple(found_words[i : i + n]) for i in range(len(found_words) - n + 1))
    found = []
    for text in evaluation:
        found_words = words(text)
        if not found_words:
            continue
        if len(found_words) < n:
            if f" {' '.join(found_words)} " in joined and len(found_words) >= 4:
                found.append(text)
        elif any(tuple(found_words[i : i + n]) in grams for i in range(len(found_words) - n + 1)):
            found.append(text)
    return found
