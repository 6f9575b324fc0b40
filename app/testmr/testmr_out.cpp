/* SPDX-License-Identifier: BSD-3-Clause */
#include "testmr_out.h"

#include <cerrno>

namespace nicmr::testmr {

const char *errno_name(int rc)
{
	switch (-rc) {
	case 0:
		return "0";
	case EINVAL:
		return "-EINVAL";
	case ENOENT:
		return "-ENOENT";
	case ENOKEY:
		return "-ENOKEY";
	case EKEYREVOKED:
		return "-EKEYREVOKED";
	case EKEYREJECTED:
		return "-EKEYREJECTED";
	case EACCES:
		return "-EACCES";
	case ERANGE:
		return "-ERANGE";
	case EAGAIN:
		return "-EAGAIN";
	case EBUSY:
		return "-EBUSY";
	case ENOSPC:
		return "-ENOSPC";
	case E2BIG:
		return "-E2BIG";
	case EOPNOTSUPP:
		return "-EOPNOTSUPP";
	case EFAULT:
		return "-EFAULT";
	case ENOTCONN:
		return "-ENOTCONN";
	case ETIMEDOUT:
		return "-ETIMEDOUT";
	case EEXIST:
		return "-EEXIST";
	case ENOMEM:
		return "-ENOMEM";
	case EXDEV:
		return "-EXDEV";
	case EOVERFLOW:
		return "-EOVERFLOW";
	case EPERM:
		return "-EPERM";
	case EIO:
		return "-EIO";
	case EISCONN:
		return "-EISCONN";
	case EADDRNOTAVAIL:
		return "-EADDRNOTAVAIL";
	case EADDRINUSE:
		return "-EADDRINUSE";
	case EPROTO:
		return "-EPROTO";
	case ECONNRESET:
		return "-ECONNRESET";
	case ECONNREFUSED:
		return "-ECONNREFUSED";
	default:
		return "an error";
	}
}

} // namespace nicmr::testmr
