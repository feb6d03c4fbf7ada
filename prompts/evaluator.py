"""The paper's few-shot prompt that asks an LLM whether a document answers a question.

Yan et al. (2024), appendix, Table 8: "The few-shot prompt to GPT-3.5 Turbo as the evaluator".
The instruction, four labelled examples and the open query, as in the paper; fields are
separated by blank lines and the model is to answer "Yes" or "No".
"""

EVALUATOR_INSTRUCTION = (
    "Given a question, does the following document have exact information to answer the "
    "question? Answer yes or no only."
)

EVALUATOR_EXAMPLES: tuple[tuple[str, str, str], ...] = (
    (
        "In what city was Abraham Raimbach born?",
        "Bancroft was born on November 25, 1839 in New Ipswich, New Hampshire to James Bancroft "
        "and Sarah Kimball. At an early age he was cared for by Mr. and Mrs. Patch of Ashby, "
        "Massachusetts, the neighboring town. While not legally adopted, they named him Cecil "
        "Franklin Patch Bancroft, adding Franklin Patch after the son Mr. and Mrs. Patch had who "
        "recently died. He attended public schools in Ashby as well as the Appleton Academy in "
        "New Ipswich. He entered Dartmouth College in 1856 at the age of sixteen and graduated in "
        "1860 near the top of his class. Bancroft continued his education as he began his career "
        "in teaching. He took classes at the Union Theological Seminary in New York City during "
        "the 1864-65 academic year. While there he was a member of the United States Christian "
        "Commission, traveling to support soldiers during the Civil War. He then transferred to "
        "the Andover Theological Seminary where he would graduate in 1867.",
        "No.",
    ),
    (
        "In what country is Wilcza Jama, Sokółka County?",
        "Wilcza Jama is a village in the administrative district of Gmina Sokółka, within "
        "Sokółka County, Podlaskie Voivodeship, in north-eastern Poland, close to the border "
        "with Belarus.",
        "Yes.",
    ),
    (
        "What sport does 2004 Legg Mason Tennis Classic play?",
        "The 2004 Legg Mason Tennis Classic was the 36th edition of this tennis tournament and "
        "was played on outdoor hard courts. The tournament was part of the International Series "
        "of the 2004 ATP Tour. It was held at the William H.G. FitzGerald Tennis Center in "
        "Washington, D.C. from August 16 through August 22, 2004.",
        "Yes.",
    ),
    (
        "Who is the author of Skin?",
        "The Skin We're In: A Year of Black Resistance and Power is a book by Desmond Cole "
        "published by Doubleday Canada in 2020. The Skin We're In describes the struggle against "
        "racism in Canada during the year 2017, chronicling Cole's role as an anti-racist "
        "activist and the impact of systemic racism in Canadian society. Among the events it "
        "discusses are the aftermath of the assault of Dafonte Miller in late 2016 and Canada "
        "150. The work argues that Canada is not immune to the anti-Black racism that "
        "characterizes American society. Due to an error by the publisher, the initial printing "
        "of the book's cover did not include word Black in the subtitle. The mistake was later "
        "corrected. The book won the Toronto Book Award for 2020. In 2021, the book was "
        "nominated for the Shaughnessy Cohen Prize for Political Writing.",
        "No.",
    ),
)
"""(question, document, answer) examples of Table 8, in the paper's order."""

EVALUATOR_ANSWERS: tuple[str, str] = ("yes", "no")
"""The two answers the prompt allows, positive first."""


def _block(question: str, document: str, answer: str = "") -> str:
    block = f"Question: {question}\n\nDocument: {document}\n\nAnswer:"
    return f"{block} {answer}" if answer else block


def evaluator_prompt(question: str, document: str) -> str:
    """Render the few-shot prompt as one text, ending with an open ``Answer:`` line.

    Args:
        question: The user question.
        document: The passage to judge.

    Returns:
        Instruction, the examples and the query, separated by blank lines.
    """
    shots = [_block(q, d, a) for q, d, a in EVALUATOR_EXAMPLES]
    query = _block(question.strip(), document.strip())
    return "\n\n".join([EVALUATOR_INSTRUCTION, *shots, query])
