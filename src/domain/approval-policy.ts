/**
 * Approvals bound to the call (README, "Approvals"): a service's `require_approval` globs over its
 * own tool names say which calls wait for a person's decision, and a call's arguments are bound to
 * that decision by a digest of their canonical JSON, so an approval of `rm {"path": "/tmp/a"}` can
 * never let `rm {"path": "/"}` through. Free of I/O; the waiting itself is src/runtime/approvals.ts.
 */
import { createHash } from "node:crypto"
import picomatch from "picomatch"
import { canonicalJson } from "./service-definition.js"

/** The fields of a definition this module reads. */
export interface ApprovalFields {
  readonly require_approval?: ReadonlyArray<string> | undefined
  readonly [extra: string]: unknown
}

const NEVER = (): boolean => false
const policies = new WeakMap<object, (tool: string) => boolean>()

/**
 * Whether a call of `tool` (the service's own name) needs an approval under `def`: compiled once per
 * definition object (definitions are never changed in place), so a call tests one regex at most.
 */
export const approvalRequired = (def: ApprovalFields, tool: string): boolean => {
  let test = policies.get(def)
  if (test === undefined) {
    const globs = def.require_approval
    test = Array.isArray(globs) && globs.length > 0 ? picomatch([...globs], { dot: true }) : NEVER
    policies.set(def, test)
  }
  return test(tool)
}

/** The digest an approval is bound to: SHA-256 (hex) of the arguments' canonical JSON (keys sorted). */
export const argumentsDigest = (args: unknown): string => createHash("sha256").update(canonicalJson(args ?? {})).digest("hex")
