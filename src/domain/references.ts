/**
 * `${VAR}` references in a definition, as MCP clients write them: `${VAR}` and `${VAR:-default}`
 * (Claude Code) and `${env:VAR}` (Cursor, VS Code). They are expanded in `url`, `headers`, `env`,
 * `args` and `cwd` only when the service connects (src/runtime/adapter.ts), from the store's
 * environment and the service's `envFile`: the services file and every view keep the reference, so
 * a secret need not sit in the file at all. Other forms (`${input:key}`, `${workspaceFolder}`) are
 * left as written (the services file notes them). No I/O here.
 */
import type { ResolvedDefinition } from "./service-definition.js"

/** One reference: its variable, and its default when it has one. */
const REFERENCE = /\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g

/** Whether a text holds a reference this module expands. */
export const hasReference = (text: string): boolean => {
  REFERENCE.lastIndex = 0
  const found = REFERENCE.test(text)
  REFERENCE.lastIndex = 0
  return found
}

/** A variable that is referenced without a default and is not set: names it and where, never a value. */
export class UndefinedVariable extends Error {
  readonly _tag = "UndefinedVariable"
  constructor(
    readonly variable: string,
    readonly field: string
  ) {
    super(`${field} refers to the variable ${variable}, which is not set (neither in the store's environment nor in "envFile") and has no default (\${${variable}:-default})`)
  }
}

/** Variables by name: the store's environment, the envFile's over it. */
export type Variables = Readonly<Record<string, string | undefined>>

/** A text with its references expanded; a default is used when the variable is unset or empty (as a shell does). */
export const expandText = (text: string, vars: Variables, field: string): string =>
  text.includes("${")
    ? text.replace(REFERENCE, (_all, name: string, fallback: string | undefined) => {
        const value = vars[name]
        if (value !== undefined && (value !== "" || fallback === undefined)) return value
        if (fallback !== undefined) return fallback
        throw new UndefinedVariable(name, field)
      })
    : text

const expandRecord = (record: Readonly<Record<string, string>>, vars: Variables, field: string): Record<string, string> =>
  Object.fromEntries(Object.entries(record).map(([k, v]) => [k, expandText(v, vars, `${field}.${k}`)]))

/** A resolved definition with every reference expanded; throws `UndefinedVariable` for the first one that cannot be. */
export const expandDefinition = (def: ResolvedDefinition, vars: Variables): ResolvedDefinition =>
  def.kind === "remote"
    ? { ...def, url: expandText(def.url, vars, "url"), headers: expandRecord(def.headers, vars, "headers") }
    : {
        ...def,
        args: def.args.map((a, i) => expandText(a, vars, `args[${i}]`)),
        env: expandRecord(def.env, vars, "env"),
        cwd: def.cwd === undefined ? undefined : expandText(def.cwd, vars, "cwd")
      }

/** The text fields of a definition's `oauth` object in which references are expanded (its client's id and secret). */
const OAUTH_TEXT_FIELDS = ["client_id", "client_secret"] as const

/** A definition's `oauth` object with references in its client id and secret expanded; throws `UndefinedVariable`. */
export const expandOAuth = <T extends { readonly client_id?: string | undefined; readonly client_secret?: string | undefined }>(oauth: T, vars: Variables): T => {
  let out = oauth
  for (const field of OAUTH_TEXT_FIELDS) {
    const value = oauth[field]
    if (value !== undefined && hasReference(value)) out = { ...out, [field]: expandText(value, vars, `oauth.${field}`) }
  }
  return out
}

/** Whether a definition's `oauth` object holds a reference. */
export const oauthHasReferences = (oauth: { readonly client_id?: string | undefined; readonly client_secret?: string | undefined } | undefined): boolean =>
  oauth !== undefined && OAUTH_TEXT_FIELDS.some((field) => oauth[field] !== undefined && hasReference(oauth[field]))

/** Whether a resolved definition holds any reference (most do not: they connect without a copy). */
export const definitionHasReferences = (def: ResolvedDefinition): boolean =>
  def.kind === "remote"
    ? hasReference(def.url) || Object.values(def.headers).some(hasReference)
    : def.args.some(hasReference) || Object.values(def.env).some(hasReference) || (def.cwd !== undefined && hasReference(def.cwd))
