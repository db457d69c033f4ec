/**
 * The one masking of secrets, used by every view of a service definition (list_services,
 * get_service_info, show_mcpconfig, the services-file document) and by every text that may quote
 * one (last_error, hints, transition reasons, health histories, events, records, logs). Kept here,
 * free of I/O, so that every layer masks the same way.
 *
 * What is a secret: env and header values; a URL's user-info (user and password); the values of
 * query parameters whose names look like credentials; `args` values that follow a credential flag
 * (`--token X`, `--api-key X`) or are of the form `--x-token=X`; and any value of an unknown field
 * whose name looks like a credential. A name "looks like a credential" when it contains `key`,
 * `token`, `secret`, `password`, `passwd`, `auth`, `sig` or `credential` (any case).
 *
 * How it is shown: the value becomes `***` (always three stars, as the API shows env and header
 * values, so nothing of its length shows); the shape around it stays
 * (`http://***:***@host/mcp?api_key=***`, `--token=***`). A `${VAR}`
 * reference is not a secret: it is shown as written (`Bearer ${TOKEN}`), with any other text of the
 * same value masked unless it is only a scheme word (`Bearer `) or punctuation.
 *
 * Texts (error messages) are scrubbed twice over: every URL in them is masked as above, and every
 * secret value the service's definition holds (`secretValues`, taken from the definition as it was
 * connected, after `${VAR}` expansion) is replaced wherever it appears, so that an upstream that
 * echoes a header back, or a process that prints its environment, cannot show one either.
 */

/** What a masked value is shown as. */
export const MASK = "***"

/** A name that looks like a credential (a query parameter, a flag, an unknown field). */
const CREDENTIAL_NAME = /key|token|secret|passw|auth|sig|credential|cookie/i

export const looksLikeCredential = (name: string): boolean => CREDENTIAL_NAME.test(name)

/** `${VAR}`, `${VAR:-default}` or `${env:VAR}` (src/domain/references.ts expands them). */
const REFERENCE = /\$\{[^}]*\}/g

/** Text of a value with a reference that may stay in clear: a scheme word or punctuation. */
const HARMLESS = /^(?:(?:Bearer|Basic|Token|Bot)\s+|[^A-Za-z0-9]*)$/i

/**
 * A secret value as shown: `***`, or, when it holds `${VAR}` references, the references as written
 * with the text between them masked (unless that text is harmless: `Bearer `, `:`, `/`).
 */
export const maskValue = (value: unknown): string => {
  if (typeof value !== "string" || !value.includes("${")) return MASK
  let out = ""
  let last = 0
  for (const m of value.matchAll(REFERENCE)) {
    out += maskLiteral(value.slice(last, m.index))
    out += m[0]
    last = m.index + m[0].length
  }
  out += maskLiteral(value.slice(last))
  return out
}

const maskLiteral = (text: string): string => (text === "" || HARMLESS.test(text) ? text : MASK)

/** scheme://user-info@ at the start of a URL. */
const USER_INFO = /^([a-z][a-z0-9+.-]*:\/\/)([^@/?#\s]*)@/i

/** A query parameter (or fragment parameter): its name and value. */
const QUERY_PARAM = /([?&#;])([^=&#;\s]*)=([^&#;\s]*)/g

/**
 * A URL (or URL-like text: `${BASE}/mcp?token=${T}`) with its user-info and its credential-looking
 * query values masked; anything else unchanged. Works on text, not on a parsed URL, so that a URL
 * the parser refuses is masked just the same.
 */
export const maskUrl = (url: string): string =>
  url
    .replace(USER_INFO, (_all, scheme: string, info: string) => {
      const colon = info.indexOf(":")
      const masked = colon < 0 ? maskValue(info) : `${maskValue(info.slice(0, colon))}:${maskValue(info.slice(colon + 1))}`
      return `${scheme}${masked}@`
    })
    .replace(QUERY_PARAM, (all, sep: string, name: string, value: string) =>
      looksLikeCredential(safeDecode(name)) && value !== "" ? `${sep}${name}=${maskValue(value)}` : all
    )

const safeDecode = (s: string): string => {
  try {
    return decodeURIComponent(s)
  } catch {
    return s
  }
}

/** A flag whose value is a credential: `--token`, `--api-key`, `-password`, `--x-auth-token`. */
const isCredentialFlag = (arg: string): boolean => /^--?[A-Za-z]/.test(arg) && looksLikeCredential(arg.replace(/^-+/, ""))

/**
 * A program's arguments with credentials masked: the value after a credential flag (`--token X`),
 * the value of `--x-token=X`, and the user-info and credential query values of URL arguments.
 */
export const maskArgs = (args: ReadonlyArray<unknown>): Array<string> => {
  const out: Array<string> = []
  let maskNext = false
  for (const arg of args) {
    if (typeof arg !== "string") continue
    if (maskNext && !arg.startsWith("-")) {
      out.push(maskValue(arg))
      maskNext = false
      continue
    }
    maskNext = false
    const eq = arg.indexOf("=")
    if (eq > 0 && isCredentialFlag(arg.slice(0, eq))) {
      out.push(`${arg.slice(0, eq + 1)}${maskValue(arg.slice(eq + 1))}`)
      continue
    }
    if (eq < 0 && isCredentialFlag(arg)) maskNext = true
    out.push(arg.includes("://") ? maskUrls(arg) : arg)
  }
  return out
}

/** Fields of a definition whose values are shown as they are (none of them holds a secret by itself). */
const PLAIN_FIELDS = new Set(["transport", "type", "command", "cwd", "disabled", "envFile", "name", "include_tools", "exclude_tools", "require_approval"])

const maskRecord = (r: unknown): unknown =>
  typeof r === "object" && r !== null && !Array.isArray(r) ? Object.fromEntries(Object.keys(r).map((k) => [k, maskValue((r as Record<string, unknown>)[k])])) : MASK

/** An unknown field's value: masked whole when its name looks like a credential, else its nested fields so. */
const maskExtra = (name: string, value: unknown): unknown => {
  if (looksLikeCredential(name)) return typeof value === "string" ? maskValue(value) : MASK
  if (typeof value === "string") return value.includes("://") ? maskUrls(value) : value
  if (Array.isArray(value)) return value.map((v) => maskExtra("", v))
  if (typeof value === "object" && value !== null) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, maskExtra(k, v)]))
  return value
}

/**
 * A definition as clients see it: every secret masked (see the top of this file); known fields
 * of the wrong type (a hand-edited file) are masked whole rather than shown.
 */
export const maskDefinition = <D>(def: D): D => {
  if (typeof def !== "object" || def === null || Array.isArray(def)) return def
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(def)) {
    if (k === "env" || k === "headers") out[k] = maskRecord(v)
    else if (/url$/i.test(k)) out[k] = typeof v === "string" ? maskUrl(v) : MASK
    else if (k === "args") out[k] = Array.isArray(v) ? maskArgs(v) : MASK
    else if (PLAIN_FIELDS.has(k)) out[k] = v
    // An upstream OAuth client (src/runtime/upstream-oauth.ts): its id, scopes and grant are shown, its secret is not.
    else if (k === "oauth") out[k] = maskExtra("", v)
    else out[k] = maskExtra(k, v)
  }
  return out as D
}

/**
 * A services-file document with every definition masked: those under `mcpServers` and `servers`
 * (VS Code), at the top and in each agent of `agents`; any other field as an unknown field.
 */
export const maskDocument = (doc: unknown): unknown => {
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) return maskExtra("", doc)
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(doc)) {
    const isObject = typeof v === "object" && v !== null && !Array.isArray(v)
    if ((k === "mcpServers" || k === "servers") && isObject) {
      out[k] = Object.fromEntries(Object.entries(v).map(([name, def]) => [name, maskDefinition(def)]))
    } else if (k === "agents" && isObject) {
      out[k] = Object.fromEntries(Object.entries(v).map(([id, agent]) => [id, maskDocument(agent)]))
    } else out[k] = maskExtra(k, v)
  }
  return out
}

/** Every URL in a text. */
const URL_IN_TEXT = /\b[a-z][a-z0-9+.-]*:\/\/[^\s"'<>`]+/gi

/** A text with every URL in it masked (`maskUrl`). */
export const maskUrls = (text: string): string => text.replace(URL_IN_TEXT, (url) => maskUrl(url))

/** Known values shorter than this are not searched for in texts (they would mask common words). */
const MIN_SCRUBBED = 4

/**
 * The secret values a definition holds, as connected (after `${VAR}` expansion): header and env
 * values, the URL's user-info and credential query values, credential `args` values, and string
 * values of credential-looking unknown fields. Their URL-encoded forms too (a text may quote a URL).
 */
export const secretValues = (def: {
  readonly url?: unknown
  readonly headers?: unknown
  readonly env?: unknown
  readonly args?: unknown
  readonly [k: string]: unknown
}): ReadonlyArray<string> => {
  const out = new Set<string>()
  const add = (v: unknown) => {
    if (typeof v !== "string") return
    for (const s of [v, v.replace(/^(Bearer|Basic|Token|Bot)\s+/i, ""), safeEncode(v)]) if (s.length >= MIN_SCRUBBED) out.add(s)
  }
  for (const record of [def.headers, def.env]) if (typeof record === "object" && record !== null) Object.values(record).forEach(add)
  if (typeof def.url === "string") {
    const info = USER_INFO.exec(def.url)?.[2]
    if (info !== undefined) for (const part of info.split(":")) add(safeDecode(part))
    for (const m of def.url.matchAll(QUERY_PARAM)) if (looksLikeCredential(safeDecode(m[2]!))) add(safeDecode(m[3]!))
  }
  if (Array.isArray(def.args)) {
    let next = false
    for (const arg of def.args) {
      if (typeof arg !== "string") continue
      if (next && !arg.startsWith("-")) add(arg)
      const eq = arg.indexOf("=")
      if (eq > 0 && isCredentialFlag(arg.slice(0, eq))) add(arg.slice(eq + 1))
      next = eq < 0 && isCredentialFlag(arg)
    }
  }
  for (const [k, v] of Object.entries(def)) if (!PLAIN_FIELDS.has(k) && k !== "url" && k !== "args" && looksLikeCredential(k)) add(v)
  // Longest first, so that a value containing another is replaced whole.
  return [...out].sort((a, b) => b.length - a.length)
}

const safeEncode = (s: string): string => {
  try {
    return encodeURIComponent(s)
  } catch {
    return s
  }
}

/** A text (an error message, a reason, a stderr line) with its URLs masked and the given secret values replaced. */
export const scrubText = (text: string, secrets: ReadonlyArray<string> = []): string => {
  let out = maskUrls(text)
  for (const s of secrets) if (out.includes(s)) out = out.split(s).join(MASK)
  return out
}
