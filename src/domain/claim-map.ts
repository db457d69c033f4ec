/**
 * Which claims of an access token name the store's principal (`--auth-claim-map`): its role, its
 * agent, its tool globs and its scopes. A value, checked here where the options are checked; the
 * token's claims are read in src/http/oauth-resource/token-claims.ts.
 */

/** The claim each part of a principal is read from. */
export interface ClaimMap {
  readonly role: string
  readonly agent_id: string
  readonly tools: string
  readonly scope: string
}

export const DEFAULT_CLAIMS: ClaimMap = { role: "role", agent_id: "agent_id", tools: "tools", scope: "scope" }

export const CLAIM_MAP_KEYS: ReadonlyArray<keyof ClaimMap> = ["role", "agent_id", "tools", "scope"]

/** Why a `--auth-claim-map` value is refused (undefined when it maps known keys to claim names). */
export const claimMapProblem = (value: unknown): string | undefined => {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return 'must be a JSON object such as {"role": "mcp_role"}'
  for (const [key, name] of Object.entries(value)) {
    if (!(CLAIM_MAP_KEYS as ReadonlyArray<string>).includes(key)) return `has no key "${key}" (known keys: ${CLAIM_MAP_KEYS.join(", ")})`
    if (typeof name !== "string" || name === "" || name.length > 200) return `maps "${key}" to ${JSON.stringify(name)}: a claim name is a non-empty string of at most 200 characters`
  }
  return undefined
}

/** The full map from a checked partial one. */
export const claimMapOf = (given: Partial<ClaimMap> | undefined): ClaimMap => ({ ...DEFAULT_CLAIMS, ...given })
