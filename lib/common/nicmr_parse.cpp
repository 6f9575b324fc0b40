/* SPDX-License-Identifier: BSD-3-Clause */
#include "nicmr_parse.h"

#include <limits>

namespace nicmr {

bool parse_number(std::string_view word, uint64_t *out)
{
	unsigned base = 10;
	if (word.size() > 2 && word[0] == '0' && (word[1] == 'x' || word[1] == 'X')) {
		base = 16;
		word.remove_prefix(2);
	}
	if (word.empty())
		return false;
	uint64_t v = 0;
	for (char c : word) {
		unsigned d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (base == 16 && c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (base == 16 && c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return false;
		if (v > (std::numeric_limits<uint64_t>::max() - d) / base)
			return false;
		v = v * base + d;
	}
	*out = v;
	return true;
}

bool parse_size(std::string_view word, uint64_t *out)
{
	unsigned shift = 0;
	if (!word.empty()) {
		switch (word.back()) {
		case 'k':
		case 'K':
			shift = 10;
			break;
		case 'm':
		case 'M':
			shift = 20;
			break;
		case 'g':
		case 'G':
			shift = 30;
			break;
		default:
			break;
		}
	}
	if (shift != 0)
		word.remove_suffix(1);
	uint64_t v;
	if (!parse_number(word, &v))
		return false;
	if (shift != 0 && v > (std::numeric_limits<uint64_t>::max() >> shift))
		return false;
	*out = v << shift;
	return true;
}

} // namespace nicmr
