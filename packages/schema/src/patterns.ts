/** A page size's digits (query strings are not coerced), and how a refusal of it reads. */
export const PAGE_SIZE = '^(100|[1-9][0-9]?)$';

/** A spoken language's code, as OpenAI's transcription takes it (ISO-639-1; three letters for a language that has no two-letter code). */
export const LANGUAGE_CODE = '^[A-Za-z]{2,3}$';

/**
 * A tool's function name or a response format's name as OpenAI's API takes it (and the providers behind it, which
 * refuse others with a 400 or 422).
 */
export const OPENAI_NAME = '^[a-zA-Z0-9_-]{1,64}$';

/** A name an operator gives a workspace or key: something other than white space, which lists would show as blank. */
export const VISIBLE_NAME = '\\S';

/** A key of `logit_bias`: a token id of the model's tokenizer, as OpenAI's API takes it. */
export const TOKEN_ID = '^[0-9]{1,10}$';

/** What each string pattern of the schemas asks for, in words: a refusal says this rather than the expression. */
export const PATTERN_MEANINGS: Readonly<Record<string, string>> = {
  [PAGE_SIZE]: 'must be a whole number from 1 to 100',
  [LANGUAGE_CODE]: "must be the language's ISO-639-1 code, such as 'fr' or 'en'",
  [OPENAI_NAME]: 'must be 1 to 64 letters, digits, underscores or dashes (no spaces, dots or other characters)',
  [TOKEN_ID]: 'must have token ids as its keys (whole numbers, such as "50256")',
  [VISIBLE_NAME]: 'must hold something other than white space',
};
