// test/browser/png_check.mjs -- does a PNG screenshot show a rendered
// flame chart?  Used by test/browser/run.sh; needs only node (no PIL, no
// npm packages): a minimal PNG decoder (8-bit RGB/RGBA, non-interlaced,
// as Chromium writes them) plus a few pixel statistics.
//
//   node png_check.mjs FILE.png [--min-bytes N] [--min-coloured F]
//
// Prints one line of statistics.  Exits 0 when the image is a valid PNG
// of at least --min-bytes bytes (default 10240) that is not a single
// colour, has at least 16 distinct colours, and whose area below the
// 20-pixel toolbar has at least a fraction --min-coloured (default 0.04)
// of "coloured" pixels (max-min channel spread >= 24: speedscope's frame
// colours; text, grid lines and backgrounds are grey or white) spread over
// at least 3 hue bands of 30 degrees holding >= 0.2% of that area each
// (speedscope colours frames by function, so a flame chart has several
// hues; its landing page has one: the blue "Browse" button).  Exits 1
// otherwise, 2 when the file cannot be read or decoded.
import fs from 'node:fs'
import zlib from 'node:zlib'

function die(code, msg) {
  console.log(msg)
  process.exit(code)
}

const args = process.argv.slice(2)
const file = args[0]
if (!file) die(2, 'usage: node png_check.mjs FILE.png [--min-bytes N] [--min-coloured F]')
let minBytes = 10240
let minColoured = 0.04
for (let i = 1; i < args.length; i += 2) {
  if (args[i] === '--min-bytes') minBytes = Number(args[i + 1])
  else if (args[i] === '--min-coloured') minColoured = Number(args[i + 1])
  else die(2, `unknown option ${args[i]}`)
}

let buf
try {
  buf = fs.readFileSync(file)
} catch (e) {
  die(2, `cannot read ${file}: ${e.message}`)
}
const SIG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
if (buf.length < 8 || !buf.subarray(0, 8).equals(SIG)) die(2, `${file}: not a PNG (bad signature)`)

let off = 8
let ihdr = null
const idat = []
let sawEnd = false
while (off + 8 <= buf.length) {
  const len = buf.readUInt32BE(off)
  const type = buf.toString('latin1', off + 4, off + 8)
  if (off + 12 + len > buf.length) die(2, `${file}: truncated ${type} chunk`)
  const data = buf.subarray(off + 8, off + 8 + len)
  if (type === 'IHDR') ihdr = data
  else if (type === 'IDAT') idat.push(data)
  else if (type === 'IEND') { sawEnd = true; break }
  off += 12 + len
}
if (!ihdr || !sawEnd || idat.length === 0) die(2, `${file}: missing IHDR, IDAT or IEND`)
const width = ihdr.readUInt32BE(0)
const height = ihdr.readUInt32BE(4)
const depth = ihdr[8], ctype = ihdr[9], interlace = ihdr[12]
if (depth !== 8 || (ctype !== 2 && ctype !== 6) || interlace !== 0)
  die(2, `${file}: unsupported PNG (depth ${depth}, colour type ${ctype}, interlace ${interlace})`)
const bpp = ctype === 6 ? 4 : 3
const stride = width * bpp

let raw
try {
  raw = zlib.inflateSync(Buffer.concat(idat))
} catch (e) {
  die(2, `${file}: bad image data: ${e.message}`)
}
if (raw.length < height * (stride + 1)) die(2, `${file}: image data too short`)

// Undo the per-row filters in place into px.
const px = Buffer.alloc(height * stride)
for (let y = 0; y < height; y++) {
  const ft = raw[y * (stride + 1)]
  const src = y * (stride + 1) + 1
  const dst = y * stride
  const up = dst - stride
  for (let x = 0; x < stride; x++) {
    const a = x >= bpp ? px[dst + x - bpp] : 0
    const b = y > 0 ? px[up + x] : 0
    const c = x >= bpp && y > 0 ? px[up + x - bpp] : 0
    let v = raw[src + x]
    switch (ft) {
      case 0: break
      case 1: v += a; break
      case 2: v += b; break
      case 3: v += (a + b) >> 1; break
      case 4: {
        const p = a + b - c
        const pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c)
        v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c
        break
      }
      default: die(2, `${file}: bad filter type ${ft} in row ${y}`)
    }
    px[dst + x] = v & 0xff
  }
}

const colours = new Set()
let coloured = 0, below = 0
const TOOLBAR = 20
const hueBands = new Array(12).fill(0)
for (let y = 0; y < height; y++) {
  for (let x = 0; x < width; x++) {
    const i = y * stride + x * bpp
    const r = px[i], g = px[i + 1], b = px[i + 2]
    colours.add((r << 16) | (g << 8) | b)
    if (y >= TOOLBAR) {
      below++
      const max = Math.max(r, g, b), min = Math.min(r, g, b), d = max - min
      if (d >= 24) {
        coloured++
        let h = max === r ? ((g - b) / d) % 6 : max === g ? (b - r) / d + 2 : (r - g) / d + 4
        if (h < 0) h += 6
        hueBands[Math.floor(h * 2) % 12]++
      }
    }
  }
}
const frac = below ? coloured / below : 0
const bands = hueBands.filter(n => below && n / below >= 0.002).length
const stats = `${file}: ${width}x${height}, ${buf.length} bytes, ${colours.size} colours, ` +
  `${(100 * frac).toFixed(1)}% coloured below the toolbar in ${bands} hue bands`
const why = []
if (buf.length < minBytes) why.push(`smaller than ${minBytes} bytes`)
if (colours.size < 16) why.push(colours.size === 1 ? 'a single colour' : 'fewer than 16 colours')
if (frac < minColoured) why.push(`less than ${(100 * minColoured).toFixed(1)}% coloured pixels (no flame chart)`)
if (bands < 3) why.push(`fewer than 3 hue bands (no flame chart)`)
if (why.length) die(1, `${stats}; ${why.join(', ')}`)
console.log(stats)
